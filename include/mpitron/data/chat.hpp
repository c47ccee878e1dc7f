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
//
//   hf:DIR   the model's own template: DIR/tokenizer_config.json's "chat_template" (a string, or
//            the list form [{"name", "template"}] whose "default" is taken; else
//            DIR/chat_template.jinja), run by mpitron's Jinja subset (jinja.hpp) as transformers'
//            apply_chat_template runs it: messages (each record's message objects as they are, any
//            fields and roles), tools=None, documents=None, add_generation_prompt, and the named
//            special tokens of tokenizer_config.json (bos_token, eos_token, unk_token, pad_token,
//            ..., additional_special_tokens; a string or {"content": ...}).
//            The rendered text is split at every occurrence of the tokenizer's special tokens
//            (type hf: its tokenizer.json's added tokens marked special, longest first, with their
//            lstrip / rstrip; other types: the special tokens DIR names that the tokenizer holds
//            as one id); each becomes its id, the text between them is encoded as text.
//            Loss mask: for assistant message i, messages[:i] rendered with the generation prompt
//            (P_i) must be where the whole rendering starts (else the conversation is refused:
//            the template is not prefix-stable at message i; --loss-on all needs no P_i); the
//            trained text runs from the end of P_i to the end of the first end-of-turn marker
//            after it (DIR's eos_token, <|im_end|>, <|eot_id|>, <|end|> or <end_of_turn>, those
//            DIR's tokenizer files name as special tokens).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mpitron/data/tokenizer.hpp"

namespace mpitron {

struct ChatMessage {
  std::string role, content;
  std::string json;  // hf templates: the message object as the record has it (compact JSON)
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
// any_message (hf templates): a message is any object with a "role" string (content and other
// fields are the template's business; content is "" when it is not a string).
bool parse_chat_record(std::string_view line, std::vector<ChatMessage>* messages, std::string* why,
                       bool any_message = false);

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

struct HfChatTemplate;  // chat_template_hf.cpp

// A chat template by name: one of chat_template_names() or hf:DIR, bound to the tokenizer whose
// special tokens its markers become. Read only after construction (prep's workers share one).
class ChatTemplate {
 public:
  ChatTemplate(const std::string& spec, const Tokenizer& tok);
  ~ChatTemplate();
  const std::string& spec() const { return spec_; }
  bool hf() const { return hf_ != nullptr; }
  // The conversation as pieces (render_chat's contract). mask: mark the assistant replies trained
  // (hf: needs the renderings of each prefix; off for --loss-on all and generation).
  bool render(const std::vector<ChatMessage>& messages, std::vector<ChatPiece>* pieces, std::string* why,
              bool generation_prompt = false, bool mask = true) const;
  // The markers that end an assistant turn (generate stops at any of them).
  std::vector<std::string> end_markers() const;
  // hf: the special markers the rendered text is split at (longest first).
  std::vector<std::string> special_markers() const;

 private:
  std::string spec_;
  std::shared_ptr<const HfChatTemplate> hf_;
};

// "--chat-template chatml, llama3, llama2, mistral or hf:DIR" checks, for messages.
bool chat_template_known(const std::string& spec);

}  // namespace mpitron
