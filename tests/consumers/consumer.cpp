// The program every consumer test builds: includes the umbrella header, touches the API,
// and exits 0. CONSUMER_KIND names the way it got diffattn (set by the consumer project).
#include <diffattn/core/isa.hpp>
#include <diffattn/diffattn.hpp>

#include <cstdio>
#include <cstring>

#ifndef CONSUMER_KIND
#define CONSUMER_KIND "unknown"
#endif

int main() {
    diffattn::RowMatrix<float> m(2, 3);  // [2 x 3]
    m.setConstant(0.5f);
    if (m.sum() != 3.0f) return 1;
    if (std::strcmp(diffattn::version, DIFFATTN_VERSION_STRING) != 0) return 1;
    std::printf("consumer (%s): diffattn %s, compiled for %s, OK\n", CONSUMER_KIND, diffattn::version,
                diffattn::compiled_isa());
    return 0;
}
