// The bytes of setup frames (the GPU ranks' setup, runtime/gpu/rank_setup.h; the NCCL library's bootstrap rounds):
// little-endian integers and length-prefixed texts, read back with every length checked against what is left.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace jax_mscclpp {

class FrameWriter {
 public:
  FrameWriter& u32(uint32_t v) { return raw(&v, sizeof(v)); }
  FrameWriter& i64(int64_t v) { return raw(&v, sizeof(v)); }
  FrameWriter& text(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes_ += s;
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  FrameWriter& raw(const void* p, size_t n) {
    bytes_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string bytes_;
};

class FrameReader {
 public:
  explicit FrameReader(const std::string& bytes) : bytes_(bytes) {}
  bool u32(uint32_t* v) { return raw(v, sizeof(*v)); }
  bool i64(int64_t* v) { return raw(v, sizeof(*v)); }
  bool text(std::string* s) {
    uint32_t n = 0;
    if (!u32(&n) || n > bytes_.size() - at_) return false;
    s->assign(bytes_, at_, n);
    at_ += n;
    return true;
  }
  // What follows, unread (a frame's tail for another layer).
  std::string rest() const { return bytes_.substr(at_); }
  bool at_end() const { return at_ == bytes_.size(); }

 private:
  bool raw(void* p, size_t n) {
    if (n > bytes_.size() - at_) return false;
    std::memcpy(p, bytes_.data() + at_, n);
    at_ += n;
    return true;
  }
  const std::string& bytes_;
  size_t at_ = 0;
};

}  // namespace jax_mscclpp
