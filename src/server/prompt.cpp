#include "server/prompt.h"

#include "core/error.h"
#include "server/api_error.h"
#include "tokenizer/chat_template.h"

namespace dsv4::server {

BuiltPrompt build_prompt(const GenRequest& g, const Tokenizer& tok) {
    BuiltPrompt p;
    if (g.kind == GenRequest::Kind::Text) {
        if (g.prompt_tokens) {
            for (size_t i = 0; i < g.prompt_tokens->size(); ++i) {
                int32_t t = (*g.prompt_tokens)[i];
                if (t < 0 || size_t(t) >= tok.vocab_size())
                    bad_request(cat("prompt[", i, "]: token id ", t, " is outside the vocabulary [0, ", tok.vocab_size(),
                                    ")"),
                                "prompt");
            }
            p.tokens = *g.prompt_tokens;
            if (g.echo) p.echo_text = tok.decode(p.tokens);
        } else {
            // Special tokens written in a raw prompt are parsed, so a client can spell out a
            // template by hand; BOS is added the way the model expects.
            p.tokens = tok.encode(g.prompt_text, tok.add_bos() && tok.bos_id() >= 0, true);
            p.echo_text = g.prompt_text;
        }
        if (p.tokens.empty()) bad_request("prompt: the prompt is empty", "prompt");
        return p;
    }
    ChatOptions co;
    co.thinking = g.thinking;
    co.reasoning_effort = g.reasoning_effort;
    co.tools = g.tools;
    co.response_format = g.response_format;
    co.bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
    std::string text;
    try {
        text = render_chat(g.messages, co);
    } catch (const ApiError&) {
        throw;
    } catch (const Error& e) {
        bad_request(e.what(), "messages");
    }
    // A reply that continues a given assistant turn: the turn's text follows the generation
    // prompt (whose "</think>" already closed the reasoning), so the output starts as text.
    text += g.assistant_prefix;
    p.tokens = tok.encode(text, false, true);
    p.thinking = g.thinking && g.assistant_prefix.empty();
    if (p.tokens.empty()) bad_request("messages: the conversation renders to no tokens", "messages");
    return p;
}

}  // namespace dsv4::server
