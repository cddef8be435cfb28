// Splits what the model writes after the generation prompt into reasoning, visible text and
// tool calls, incrementally, so the same parser serves streamed and whole responses:
//
//   [reasoning "</think>"]  text  ["<｜DSML｜tool_calls>" invokes "</｜DSML｜tool_calls>"]
//
// with each call written in the DSML form the chat template teaches the model:
//
//   <｜DSML｜invoke name="NAME">
//   <｜DSML｜parameter name="P" string="true">raw text</｜DSML｜parameter>
//   <｜DSML｜parameter name="Q" string="false">JSON value</｜DSML｜parameter>
//   </｜DSML｜invoke>
//
// Markers split across pushes are held back until they are decided. A call is reported once
// its invoke is complete, with its parameters turned into a JSON object (OpenAI's "arguments"
// text). Whatever cannot be parsed (a block cut off by max_tokens, a malformed invoke) comes
// out as text at finish(), so nothing the model wrote disappears.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace dsv4::server {

struct OutputEvent {
    enum class Kind { Reasoning, Text, ToolCall };
    Kind kind = Kind::Text;
    std::string text;  // Reasoning / Text: the new piece
    ToolCall call;     // ToolCall: name and arguments (a JSON object as text)
    size_t call_index = 0;
};

struct ParsedOutput {
    std::string reasoning;
    std::string text;
    std::vector<ToolCall> tool_calls;
};

class OutputParser {
public:
    // thinking: the prompt ended with "<think>", so the output starts inside the reasoning.
    explicit OutputParser(bool thinking);

    std::vector<OutputEvent> push(std::string_view piece);
    // The end of the output: everything held back is decided.
    std::vector<OutputEvent> finish();

    // Everything reported so far.
    const ParsedOutput& output() const { return out_; }

private:
    enum class Mode { Reasoning, Text, Tools };
    void emit(OutputEvent::Kind kind, std::string text, std::vector<OutputEvent>& ev);
    void run(std::vector<OutputEvent>& ev, bool final);

    Mode mode_;
    std::string buf_;           // undecided bytes of the current mode
    bool text_started_ = false; // leading newlines of the text (after "</think>") are dropped
    std::string ws_held_;       // trailing whitespace of the text, dropped if a tool block follows
    ParsedOutput out_;
};

// One invoke body (between the invoke tag's ">" and "</｜DSML｜invoke>") to a call; false when
// it does not parse.
bool parse_invoke(std::string_view name, std::string_view body, ToolCall& call);

}  // namespace dsv4::server
