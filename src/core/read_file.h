// The checked file reader every file kdtrain reads whole goes through (configs,
// JSON documents, small text files): what is not a regular file (a directory, a
// FIFO that would block forever, a device) is refused before it is opened, and a
// file above a size bound is refused instead of being read into memory. Every
// error names the file and, for a failed system call, its reason (errno text).
#pragma once
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace kdtrain {

// Why `path` cannot be read as a file, as a message fragment: "no such file or
// directory", "is a directory, not a file", "is a FIFO (named pipe), not a regular
// file", ...; "" when it is a regular file.
std::string not_a_regular_file(const std::string& path);
// Opens a regular file read-only. What is not a regular file is refused before
// open() (a FIFO would block there forever), and the open is non-blocking with
// the type re-checked on the descriptor, so a FIFO swapped in meanwhile cannot
// hang it either. Returns the descriptor; throws "<path>: <why>".
int open_regular_file(const std::string& path);
// Reads a regular file front to back, passing each chunk to `consume`; throws
// naming the file on a read error or when it holds more than max_bytes.
void read_chunks(const std::string& path, size_t max_bytes,
                 const std::function<void(const char* data, size_t n)>& consume);
// The whole file as text; refuses files above max_bytes (a sane bound for the
// small JSON / text files read this way).
constexpr size_t kMaxTextFileBytes = 256u << 20;
std::string read_text_file(const std::string& path, size_t max_bytes = kMaxTextFileBytes);

// A whole JSON file, parsed strictly (core/json_parse.h: duplicate keys refused);
// errors name the file.
nlohmann::json read_json_file(const std::string& path);

// strerror(errno) as a std::string, for messages.
std::string errno_text();

}  // namespace kdtrain
