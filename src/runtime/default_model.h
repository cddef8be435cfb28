// Where the embedded default model lives, for commands run without --model.
#pragma once
#include <string>

namespace dsv4 {

// $DSV4_MODEL if set; else models/dsv4-tiny.gguf beside the executable's build folder
// (../models from bin or build/), else in the source tree this binary was built from.
// Throws UsageError naming the places looked at when none exists.
std::string default_model_path();

// The given path, or default_model_path() when it is empty.
std::string model_path_or_default(const std::string& given);

}  // namespace dsv4
