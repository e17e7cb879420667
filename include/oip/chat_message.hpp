#pragma once
/// \file
/// One message of a chat, as OpenAI's chat completions carry them.

#include <string>

namespace oip {

/// Its role ("system", "user", "assistant", "tool") and its text (a message given as parts is the
/// concatenation of its text parts).
struct chat_message {
  std::string role;
  std::string content;
};

}  // namespace oip
