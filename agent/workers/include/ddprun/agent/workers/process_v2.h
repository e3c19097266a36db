// The one place that includes Boost.Process v2. Boost 1.81's v2 config
// names boost::optional without including it when BOOST_PROCESS_USE_STD_FS
// is set (std::filesystem instead of Boost.Filesystem), so include it first.
#pragma once

#include <boost/optional.hpp>
#include <boost/process/v2/posix/default_launcher.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/process_handle.hpp>
#include <boost/process/v2/stdio.hpp>
