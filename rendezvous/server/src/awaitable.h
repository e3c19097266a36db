// kAwait: the completion token of the server's coroutines. `co_await
// op(..., kAwait)` yields (error_code, results...) as a tuple instead of
// throwing, so each coroutine handles a closed socket or a cancelled timer
// where it happens.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ddprun::rendezvous {

inline constexpr auto kAwait = boost::asio::as_tuple(boost::asio::use_awaitable);

}  // namespace ddprun::rendezvous
