#include "model/state.h"

namespace dsv4 {

State::State(const ModelConfig& c) : layers(static_cast<size_t>(c.n_layers)) {
    for (int l = 0; l < c.n_layers; ++l) {
        LayerState& s = layers[size_t(l)];
        s.window.reserve(static_cast<size_t>(c.window) * size_t(c.head_dim));
        AttnType t = c.attn[size_t(l)];
        if (t == AttnType::Sliding) continue;
        s.comp.width = c.head_dim;
        s.comp.coff = t == AttnType::CSA ? 2 : 1;
        s.comp.ratio = c.ratio[size_t(l)];
        if (t == AttnType::CSA) {
            s.idx.width = c.index_head_dim;
            s.idx.coff = 2;
            s.idx.ratio = c.ratio[size_t(l)];
        }
    }
}

}  // namespace dsv4
