// Internal to src/data: the SentencePiece half of Tokenizer (tokenizer_sp.cpp), and base64 for
// embedding a model file in the tokenizer JSON.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mpitron {

struct SentencePieceModel;
std::vector<int32_t> sp_encode(const SentencePieceModel& m, std::string_view text);
std::string sp_decode(const SentencePieceModel& m, const std::vector<int32_t>& ids);
const std::string& sp_model_bytes(const SentencePieceModel& m);

std::string base64_encode(std::string_view bytes);
// false when `text` is not base64 (standard alphabet, '=' padding).
bool base64_decode(std::string_view text, std::string* out);

}  // namespace mpitron
