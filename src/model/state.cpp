#include "model/state.h"

#include "core/error.h"

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

namespace {

CompressorState without_rows(const CompressorState& s) {
    CompressorState m;
    m.width = s.width;
    m.coff = s.coff;
    m.ratio = s.ratio;
    m.n_rows = s.n_rows;
    m.buf_kv = s.buf_kv;
    m.buf_gate = s.buf_gate;
    m.n_buf = s.n_buf;
    m.prev_kv = s.prev_kv;
    m.prev_gate = s.prev_gate;
    m.has_prev = s.has_prev;
    return m;
}

void restore(CompressorState& s, const CompressorState& m) {
    if (m.n_rows > s.n_rows) fail("cannot rewind a state forward (", m.n_rows, " > ", s.n_rows, " compressed rows)");
    std::vector<float> rows = std::move(s.rows);
    rows.resize(static_cast<size_t>(m.n_rows) * static_cast<size_t>(m.width));
    s = m;
    s.rows = std::move(rows);
}

size_t floats(const std::vector<float>& v) { return v.size() * sizeof(float); }

}  // namespace

StateMark State::mark() const {
    StateMark m;
    m.pos = pos;
    for (const LayerState& l : layers) m.layers.push_back({l.window, l.n_window, without_rows(l.comp), without_rows(l.idx)});
    if (device.get()) m.device = device.get()->mark();
    return m;
}

void State::rewind(const StateMark& m) {
    if (m.layers.size() != layers.size()) fail("state mark belongs to another model");
    if (m.pos > pos) fail("cannot rewind a state forward (", m.pos, " > ", pos, ")");
    for (size_t i = 0; i < layers.size(); ++i) {
        layers[i].window = m.layers[i].window;
        layers[i].n_window = m.layers[i].n_window;
        restore(layers[i].comp, m.layers[i].comp);
        restore(layers[i].idx, m.layers[i].idx);
    }
    if (device.get()) {
        if (m.device)
            device.get()->rewind(m.device);
        else
            device.reset(nullptr);  // marked before the first forward: back to nothing consumed
    }
    pos = m.pos;
}

StateBytes State::bytes() const {
    StateBytes b;
    for (const LayerState& l : layers) {
        b.window += floats(l.window);
        b.compressed += floats(l.comp.rows);
        b.indexer += floats(l.idx.rows);
        for (const CompressorState* c : {&l.comp, &l.idx})
            b.partial += floats(c->buf_kv) + floats(c->buf_gate) + floats(c->prev_kv) + floats(c->prev_gate);
    }
    if (device.get()) device.get()->add_bytes(b);
    return b;
}

StateGrowth state_growth(const ModelConfig& c) {
    StateGrowth g;
    for (int l = 0; l < c.n_layers; ++l) {
        double r = c.ratio[size_t(l)];
        if (c.attn[size_t(l)] == AttnType::CSA) {
            g.csa_per_token = (c.head_dim + c.index_head_dim) / r * sizeof(float);
            g.all_layers_per_token += g.csa_per_token;
        } else if (c.attn[size_t(l)] == AttnType::HCA) {
            g.hca_per_token = c.head_dim / r * sizeof(float);
            g.all_layers_per_token += g.hca_per_token;
        }
    }
    g.fixed_per_layer = static_cast<size_t>(c.window - 1) * static_cast<size_t>(c.head_dim) * sizeof(float);
    return g;
}

}  // namespace dsv4
