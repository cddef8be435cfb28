#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>
#include "model/model.h"
#include "tokenizer/tokenizer.h"
using namespace dsv4;
int main(int argc, char** argv) {
    const std::string dir = "/tmp/attn_review/repo/models/";
    Model m(dir + "dsv4-tiny.gguf");
    Tokenizer tok(m.file());
    std::ifstream in(dir + "retrieval_filler.txt");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<int32_t> ids = {m.config().bos};
    for (int32_t id : tok.encode(text.substr(0, 20000), false)) ids.push_back(id);
    ids.resize(600);
    const int64_t chunk = argc > 1 ? atoll(argv[1]) : 256;
    const int64_t T = 600, V = m.config().vocab;
    std::vector<float> logits(size_t(T * V));
    State st(m.config());
    for (int64_t b = 0; b < T; b += chunk) m.forward(&ids[size_t(b)], std::min(chunk, T - b), st, &logits[size_t(b * V)]);
    const char* outp = argc > 2 ? argv[2] : "logits.bin";
    std::ofstream(outp, std::ios::binary).write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size() * 4));
    printf("wrote %s (%lld x %lld)\n", outp, (long long)T, (long long)V);
}
