// Chat data for fine-tuning (`mpitron prep --format chat`, docs/data.md): JSON Lines records
// {"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...]} rendered with a
// model family's published chat template (the Jinja strings of its tokenizer_config.json, written
// out here by hand) and tokenized with a loss mask: the assistant's replies (with their
// end-of-turn marker) are trained on, the rest is context.
//
// Templates (the text equals what jinja2 renders from the published strings,
// tests/e2e/test_chat_prep.sh):
//   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n per message (any roles, in any order)
//   llama3   <|begin_of_text|> then <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT.strip()<|eot_id|>
//   llama2   [system first] then user/assistant alternating from user: <s>[INST] U.strip() [/INST] and
//            ' ' + A.strip() + ' </s>'; the system text opens the first user turn in <<SYS>> tags
//   mistral  <s> then user/assistant alternating: [INST] U [/INST] and A</s>; no system role
// Markers a tokenizer holds as special tokens (SentencePiece's <s> and </s>, GPT-2's
// <|endoftext|>) become those ids; otherwise (the byte tokenizer) they stay plain text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mpitron/data/tokenizer.hpp"

namespace mpitron {

struct ChatMessage {
  std::string role, content;
};

// One piece of a rendered conversation: text, or a marker (special) a tokenizer may hold as one
// id; trained: part of an assistant reply.
struct ChatPiece {
  std::string text;
  bool trained = false, special = false;
};

// "chatml, llama3, llama2, mistral".
const std::vector<std::string>& chat_template_names();

// One JSONL line's conversation. A line that is not an object with a non-empty "messages" list of
// {"role": system|user|assistant, "content": string} objects is bad: false, and *why names the
// message and what is wrong.
bool parse_chat_record(std::string_view line, std::vector<ChatMessage>* messages, std::string* why);

// The conversation through template `name` (chat_template_names()). A conversation the template
// refuses (roles not alternating, a system message where it has none) is bad: false and *why.
// generation_prompt: the template's add_generation_prompt (chatml, llama3: the assistant's header;
// llama2 and mistral end a user turn ready for the reply).
bool render_chat(const std::string& name, const std::vector<ChatMessage>& messages, std::vector<ChatPiece>* pieces,
                 std::string* why, bool generation_prompt = false);

// The marker that ends an assistant turn: <|im_end|>, <|eot_id|> or </s>.
std::string chat_end_marker(const std::string& name);

// The rendered text (the pieces concatenated).
std::string chat_text(const std::vector<ChatPiece>& pieces);

// Token ids of the rendered conversation and a mask byte per id (1: trained). The text between
// special markers is encoded as one string (the ids equal the tokenizer's for that text); a token
// is trained when any byte of it lies in a trained piece. loss_on_all: every token is trained.
void tokenize_chat(const Tokenizer& tok, const std::vector<ChatPiece>& pieces, bool loss_on_all,
                   std::vector<int32_t>* ids, std::vector<uint8_t>* mask);

}  // namespace mpitron
