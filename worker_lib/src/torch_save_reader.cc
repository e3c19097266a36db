#include "torch_save_reader.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <map>
#include <unordered_map>

#include "ddprun/common/error.h"
#include "error_text.h"

namespace ddprun::worker {

namespace {

using c10::IValue;
using Dict = c10::impl::GenericDict;
using List = c10::impl::GenericList;

// The checkpoint's bytes as caffe2's reader wants them (no copy).
class BytesAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesAdapter(const std::vector<char>& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char*) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::vector<char>& bytes_;
};

// Python's storage classes (torch.save writes the legacy typed names).
const std::map<std::string, at::ScalarType>& storageTypes() {
  static const std::map<std::string, at::ScalarType> kTypes = {
      {"torch.DoubleStorage", at::kDouble},
      {"torch.FloatStorage", at::kFloat},
      {"torch.HalfStorage", at::kHalf},
      {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},
      {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},
      {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},
      {"torch.BoolStorage", at::kBool},
      {"torch.ComplexFloatStorage", at::kComplexFloat},
      {"torch.ComplexDoubleStorage", at::kComplexDouble},
  };
  return kTypes;
}

Dict newDict() { return Dict(c10::AnyType::get(), c10::AnyType::get()); }
List newList() { return List(c10::AnyType::get()); }

// A key's Python repr, for keys a GenericDict cannot hash (None, tuples).
std::string keyText(const IValue& key) {
  if (key.isString()) return "'" + key.toStringRef() + "'";
  if (key.isInt()) return std::to_string(key.toInt());
  if (key.isDouble()) return fmt::format("{}", key.toDouble());
  if (key.isBool()) return key.toBool() ? "True" : "False";
  if (key.isNone()) return "None";
  if (key.isTuple()) {
    std::vector<std::string> items;
    for (const auto& item : key.toTupleRef().elements()) items.push_back(keyText(item));
    return fmt::format("({}{})", fmt::join(items, ", "), items.size() == 1 ? "," : "");
  }
  return std::string("<") + key.tagKind() + ">";
}

// Python dict keys as a GenericDict can hash them: str, int, float and bool
// as they are, any other key as its repr.
IValue dictKey(const IValue& key) {
  if (key.isString() || key.isInt() || key.isDouble() || key.isBool()) return key;
  return IValue(keyText(key));
}

// One run of the pickle machine over data.pkl.
class Unpickler {
 public:
  Unpickler(std::string_view pickle, caffe2::serialize::PyTorchStreamReader& archive,
            const std::string& what)
      : in_(pickle), archive_(archive), what_(what) {}

  IValue run();

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw ConfigError(fmt::format("checkpoint {}: {} (at byte {} of data.pkl)", what_, why, pos_));
  }
  std::string_view take(std::size_t n) {
    if (in_.size() - pos_ < n) fail("data.pkl ends in the middle of an operation");
    const std::string_view out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  template <typename T>
  T fixed() {
    T value;
    std::memcpy(&value, take(sizeof(T)).data(), sizeof(T));  // little-endian, as pickle
    return value;
  }
  std::string line() {
    const std::size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) fail("data.pkl ends inside a GLOBAL");
    std::string out(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  IValue pop() {
    if (stack_.empty()) fail("the pickle pops an empty stack");
    IValue value = std::move(stack_.back());
    stack_.pop_back();
    return value;
  }
  IValue& top() {
    if (stack_.empty()) fail("the pickle reads an empty stack");
    return stack_.back();
  }
  std::vector<IValue> popMark() {
    if (marks_.empty()) fail("the pickle has no MARK to pop to");
    std::vector<IValue> items(std::make_move_iterator(stack_.begin() + marks_.back()),
                              std::make_move_iterator(stack_.end()));
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  void setItem(IValue& target, IValue key, IValue value);
  void append(IValue& target, IValue value);
  void build(IValue& target, IValue state);
  IValue call(const IValue& callable, const IValue& args);
  IValue storage(const IValue& pid);
  IValue rebuildTensor(const std::vector<IValue>& args);

  std::string_view in_;
  std::size_t pos_ = 0;
  caffe2::serialize::PyTorchStreamReader& archive_;
  const std::string& what_;
  std::vector<IValue> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, IValue> memo_;
  std::unordered_map<std::string, at::Tensor> storages_;  // by record key
};

std::vector<IValue> elements(const IValue& value) {
  if (value.isTuple()) return value.toTupleRef().elements().vec();
  if (value.isList()) return value.toListRef().vec();
  return {};
}

std::vector<int64_t> integers(const IValue& value) {
  std::vector<int64_t> out;
  for (const auto& item : elements(value)) out.push_back(item.isInt() ? item.toInt() : -1);
  return out;
}

bool isOpaque(const IValue& value) {
  return value.isGenericDict() && value.toGenericDict().contains("__class__");
}

void Unpickler::setItem(IValue& target, IValue key, IValue value) {
  if (!target.isGenericDict()) fail("SETITEM on something that is not a dict");
  target.toGenericDict().insert_or_assign(dictKey(key), std::move(value));
}

void Unpickler::append(IValue& target, IValue value) {
  if (target.isList()) {
    target.toList().push_back(std::move(value));
  } else if (isOpaque(target)) {  // a list subclass: its items
    Dict dict = target.toGenericDict();
    if (!dict.contains("__items__")) dict.insert("__items__", newList());
    dict.at("__items__").toList().push_back(std::move(value));
  } else {
    fail("APPEND on something that is not a list");
  }
}

void Unpickler::build(IValue& target, IValue state) {
  // An OrderedDict's {'_metadata': ...} and a Parameter's Python attributes
  // are dropped, as torch.load's state_dict use ignores them; an unknown
  // object keeps its state.
  if (isOpaque(target)) target.toGenericDict().insert_or_assign("__state__", std::move(state));
}

IValue Unpickler::storage(const IValue& pid) {
  const auto fields = elements(pid);
  if (fields.size() < 5 || !fields[0].isString() || fields[0].toStringRef() != "storage" ||
      !fields[1].isString() || !fields[2].isString() || !fields[4].isInt()) {
    fail("a persistent id that is not a ('storage', type, key, location, numel) tuple");
  }
  const std::string& type = fields[1].toStringRef();
  const std::string& key = fields[2].toStringRef();
  auto cached = storages_.find(key);
  if (cached != storages_.end()) return cached->second;
  const auto dtype = storageTypes().find(type);
  if (dtype == storageTypes().end()) {
    fail(
        fmt::format("storage type {} is not read here (supported: the 12 plain dtypes' "
                    "storages; quantized and float8/uint16+ tensors are not)",
                    type));
  }
  const int64_t numel = fields[4].toInt();
  const std::string record = "data/" + key;
  if (!archive_.hasRecord(record)) fail(fmt::format("the archive has no record {}", record));
  auto [data, size] = archive_.getRecord(record);
  const auto itemSize = static_cast<int64_t>(c10::elementSize(dtype->second));
  if (numel < 0 || numel > static_cast<int64_t>(size) / itemSize) {
    fail(fmt::format("record {} holds {} bytes, fewer than {} elements of {}", record, size, numel,
                     type));
  }
  at::Tensor base = at::empty({numel}, at::TensorOptions().dtype(dtype->second));
  if (numel > 0) std::memcpy(base.data_ptr(), data.get(), static_cast<size_t>(numel * itemSize));
  storages_.emplace(key, base);
  return base;
}

// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, meta]).
IValue Unpickler::rebuildTensor(const std::vector<IValue>& args) {
  if (args.size() < 4 || !args[0].isTensor() || !args[1].isInt()) {
    fail("a _rebuild_tensor_v2 call without (storage, offset, size, stride)");
  }
  const at::Tensor& base = args[0].toTensor();
  const int64_t offset = args[1].toInt();
  const auto sizes = integers(args[2]);
  const auto strides = integers(args[3]);
  if (sizes.size() != strides.size()) fail("a tensor whose size and stride differ in length");
  int64_t last = offset;
  bool empty = false;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || strides[i] < 0) fail("a tensor with a negative size or stride");
    if (sizes[i] == 0) empty = true;
    int64_t reach = 0;
    if (__builtin_mul_overflow(std::max<int64_t>(sizes[i] - 1, 0), strides[i], &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      fail("a tensor whose size and stride reach past 64 bits");
    }
  }
  if (offset < 0 || (!empty && last >= base.numel())) {
    fail(fmt::format("a tensor reaching element {} of a storage of {}", last, base.numel()));
  }
  at::Tensor tensor = at::empty({0}, base.options());
  tensor.set_(base.storage(), offset, sizes, strides);
  return tensor;
}

IValue Unpickler::call(const IValue& callable, const IValue& args) {
  if (!callable.isString()) fail("a call of something that is not a class or function");
  const std::string& name = callable.toStringRef();
  std::vector<IValue> a = elements(args);
  if (name == "torch._utils._rebuild_tensor_v2") return rebuildTensor(a);
  if (name == "torch._utils._rebuild_parameter" ||
      name == "torch._utils._rebuild_parameter_with_state") {
    if (a.empty() || !a[0].isTensor()) fail("a parameter without its tensor");
    return a[0];
  }
  if (name == "torch._tensor._rebuild_from_type_v2") {  // (func, type, args, state)
    if (a.size() < 3) fail("a _rebuild_from_type_v2 call without its arguments");
    return call(a[0], a[2]);
  }
  if (name == "torch._utils._rebuild_tensor_v3") {
    fail(
        "a tensor of a dtype saved with _rebuild_tensor_v3 (float8, uint16/32/64, ...), "
        "which this reader does not build");
  }
  if (name == "collections.OrderedDict" || name == "collections.defaultdict" ||
      name == "builtins.dict" || name == "__builtin__.dict") {
    Dict dict = newDict();
    if (name != "collections.defaultdict" && !a.empty()) {
      for (const auto& pair : elements(a[0])) {
        const auto kv = elements(pair);
        if (kv.size() == 2) dict.insert_or_assign(dictKey(kv[0]), kv[1]);
      }
    }
    return dict;
  }
  if (name == "torch.jit._pickle.restore_type_tag" ||
      (name.starts_with("torch.jit._pickle.build_") && name.ends_with("list"))) {
    if (a.empty()) fail(fmt::format("a {} call without its value", name));
    return a[0];  // torch::pickle_save's typed containers
  }
  if (name == "builtins.set" || name == "__builtin__.set" || name == "builtins.frozenset" ||
      name == "torch.Size") {
    List list = newList();
    if (!a.empty()) {
      for (auto& item : elements(a[0])) list.push_back(std::move(item));
    }
    if (name == "torch.Size") return c10::ivalue::Tuple::create(list.vec());
    return list;
  }
  if ((name == "_codecs.encode" || name == "builtins.bytearray" || name == "torch.device") &&
      !a.empty() && a[0].isString()) {
    return a[0];  // bytes (as latin-1 text), a device's name
  }
  // Anything else is kept, never run.
  Dict opaque = newDict();
  opaque.insert("__class__", name);
  opaque.insert("__args__", c10::ivalue::Tuple::create(std::move(a)));
  return opaque;
}

IValue Unpickler::run() {
  for (;;) {
    const auto op = static_cast<unsigned char>(take(1)[0]);
    switch (op) {
      case 0x80: {  // PROTO
        const auto protocol = static_cast<unsigned char>(take(1)[0]);
        if (protocol > 5) fail(fmt::format("pickle protocol {} (torch.save writes 2)", protocol));
        break;
      }
      case 0x95:  // FRAME (protocol 4+): a length, then ordinary opcodes
        take(8);
        break;
      case '.':  // STOP
        return pop();
      case '(':  // MARK
        marks_.push_back(stack_.size());
        break;
      case 'c': {  // GLOBAL module\nname\n: the class as "module.name"
        std::string module = line();
        stack_.emplace_back(module + "." + line());
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        IValue name = pop();
        IValue module = pop();
        if (!name.isString() || !module.isString()) fail("a STACK_GLOBAL of non-strings");
        stack_.emplace_back(module.toStringRef() + "." + name.toStringRef());
        break;
      }
      case 'Q':  // BINPERSID
        stack_.push_back(storage(pop()));
        break;
      case 'R': {  // REDUCE
        IValue args = pop();
        IValue callable = pop();
        stack_.push_back(call(callable, args));
        break;
      }
      case 0x81: {  // NEWOBJ cls.__new__(cls, *args)
        IValue args = pop();
        IValue cls = pop();
        stack_.push_back(call(cls, args));
        break;
      }
      case 0x92: {  // NEWOBJ_EX (cls, args, kwargs)
        pop();
        IValue args = pop();
        IValue cls = pop();
        stack_.push_back(call(cls, args));
        break;
      }
      case 'b': {  // BUILD
        IValue state = pop();
        build(top(), std::move(state));
        break;
      }
      case ')':  // EMPTY_TUPLE
        stack_.emplace_back(c10::ivalue::Tuple::create(std::vector<IValue>{}));
        break;
      case 't':  // TUPLE
        stack_.emplace_back(c10::ivalue::Tuple::create(popMark()));
        break;
      case 0x85:    // TUPLE1
      case 0x86:    // TUPLE2
      case 0x87: {  // TUPLE3
        const std::size_t n = op - 0x84;
        if (stack_.size() < n) fail("a TUPLE of more items than the stack holds");
        std::vector<IValue> items(std::make_move_iterator(stack_.end() - n),
                                  std::make_move_iterator(stack_.end()));
        stack_.resize(stack_.size() - n);
        stack_.emplace_back(c10::ivalue::Tuple::create(std::move(items)));
        break;
      }
      case '}':  // EMPTY_DICT
        stack_.emplace_back(newDict());
        break;
      case ']':   // EMPTY_LIST
      case 0x8f:  // EMPTY_SET
        stack_.emplace_back(newList());
        break;
      case 0x91: {  // FROZENSET
        List list = newList();
        for (auto& item : popMark()) list.push_back(std::move(item));
        stack_.emplace_back(list);
        break;
      }
      case 's': {  // SETITEM
        IValue value = pop();
        IValue key = pop();
        setItem(top(), std::move(key), std::move(value));
        break;
      }
      case 'u': {  // SETITEMS
        auto items = popMark();
        if (items.size() % 2 != 0) fail("a SETITEMS with a key but no value");
        for (std::size_t i = 0; i < items.size(); i += 2) {
          setItem(top(), std::move(items[i]), std::move(items[i + 1]));
        }
        break;
      }
      case 'a': {  // APPEND
        IValue value = pop();
        append(top(), std::move(value));
        break;
      }
      case 'e':     // APPENDS
      case 0x90: {  // ADDITEMS
        for (auto& item : popMark()) append(top(), std::move(item));
        break;
      }
      case 'N':  // NONE
        stack_.emplace_back();
        break;
      case 0x88:  // NEWTRUE
        stack_.emplace_back(true);
        break;
      case 0x89:  // NEWFALSE
        stack_.emplace_back(false);
        break;
      case 'K':  // BININT1
        stack_.emplace_back(static_cast<int64_t>(fixed<uint8_t>()));
        break;
      case 'M':  // BININT2
        stack_.emplace_back(static_cast<int64_t>(fixed<uint16_t>()));
        break;
      case 'J':  // BININT
        stack_.emplace_back(static_cast<int64_t>(fixed<int32_t>()));
        break;
      case 0x8a: {  // LONG1: n bytes, little-endian two's complement
        const auto n = fixed<uint8_t>();
        const std::string_view bytes = take(n);
        if (n > 8) {
          stack_.emplace_back(fmt::format("<an integer of {} bytes>", n));
          break;
        }
        uint64_t value = 0;
        for (std::size_t i = 0; i < n; ++i) {
          value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
        }
        if (n > 0 && n < 8 && (static_cast<unsigned char>(bytes[n - 1]) & 0x80)) {
          value |= ~uint64_t{0} << (8 * n);  // sign-extend
        }
        stack_.emplace_back(static_cast<int64_t>(value));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian double
        uint64_t bits = 0;
        for (char c : take(8)) bits = (bits << 8) | static_cast<unsigned char>(c);
        double value;
        std::memcpy(&value, &bits, sizeof(value));
        stack_.emplace_back(value);
        break;
      }
      case 'X':  // BINUNICODE
      case 'T':  // BINSTRING
      case 'B':  // BINBYTES
        stack_.emplace_back(std::string(take(fixed<uint32_t>())));
        break;
      case 0x8c:  // SHORT_BINUNICODE
      case 'U':   // SHORT_BINSTRING
      case 'C':   // SHORT_BINBYTES
        stack_.emplace_back(std::string(take(fixed<uint8_t>())));
        break;
      case 0x8d:  // BINUNICODE8
      case 0x8e:  // BINBYTES8
        stack_.emplace_back(std::string(take(fixed<uint64_t>())));
        break;
      case 'q':  // BINPUT
        memo_[fixed<uint8_t>()] = top();
        break;
      case 'r':  // LONG_BINPUT
        memo_[fixed<uint32_t>()] = top();
        break;
      case 0x94:  // MEMOIZE
        memo_[memo_.size()] = top();
        break;
      case 'h':    // BINGET
      case 'j': {  // LONG_BINGET
        const uint64_t index = op == 'h' ? fixed<uint8_t>() : fixed<uint32_t>();
        auto it = memo_.find(index);
        if (it == memo_.end()) fail(fmt::format("a memo entry {} that was never put", index));
        stack_.push_back(it->second);
        break;
      }
      case '0':  // POP
        pop();
        break;
      case '1':  // POP_MARK
        popMark();
        break;
      case '2':  // DUP
        stack_.push_back(top());
        break;
      default:
        fail(fmt::format("pickle opcode 0x{:02x}, which torch.save does not write", op));
    }
  }
}

}  // namespace

bool isZipArchive(const std::vector<char>& bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), "PK\x03\x04", 4) == 0;
}

bool isTorchScriptArchive(const std::vector<char>& bytes) {
  if (!isZipArchive(bytes)) return false;
  try {
    caffe2::serialize::PyTorchStreamReader archive(std::make_shared<BytesAdapter>(bytes));
    return archive.hasRecord("constants.pkl");
  } catch (const std::exception&) {
    return false;
  }
}

c10::IValue readTorchSave(const std::vector<char>& bytes, const std::string& what) {
  if (!isZipArchive(bytes)) {
    throw ConfigError(fmt::format(
        "checkpoint {} is not a zip archive: torch.save writes one since PyTorch 1.6 (save it "
        "again without _use_new_zipfile_serialization=False)",
        what));
  }
  try {
    caffe2::serialize::PyTorchStreamReader archive(std::make_shared<BytesAdapter>(bytes));
    if (archive.hasRecord("byteorder")) {
      auto [order, size] = archive.getRecord("byteorder");
      const std::string text(static_cast<const char*>(order.get()), size);
      if (text != "little") {
        throw ConfigError(fmt::format(
            "checkpoint {} was written on a {}-endian machine; load and save it again on a "
            "little-endian one",
            what, text));
      }
    }
    if (!archive.hasRecord("data.pkl")) {
      throw ConfigError(fmt::format("checkpoint {} has no data.pkl: not a torch.save file", what));
    }
    auto [pickle, size] = archive.getRecord("data.pkl");
    Unpickler unpickler(std::string_view(static_cast<const char*>(pickle.get()), size), archive,
                        what);
    return unpickler.run();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw ConfigError(
        fmt::format("checkpoint {} is not a readable torch.save archive: {}", what, messageOf(e)));
  }
}

}  // namespace ddprun::worker
