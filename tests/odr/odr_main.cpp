// ODR check, TU 3 of 3: links odr_a.cpp and odr_b.cpp and checks that they agree.
#include <diffattn/diffattn.hpp>

#include <cstdio>
#include <string>

namespace odr {
std::string version_from_a();
std::string version_from_b();
double sum_from_a();
double sum_from_b();
}  // namespace odr

int main() {
    const std::string here = diffattn::version;
    if (odr::version_from_a() != here || odr::version_from_b() != here) {
        std::fprintf(stderr, "odr: version strings differ between translation units\n");
        return 1;
    }
    if (odr::sum_from_a() != 6.0 || odr::sum_from_b() != 12.0) {
        std::fprintf(stderr, "odr: unexpected sums %g %g\n", odr::sum_from_a(), odr::sum_from_b());
        return 1;
    }
    try {
        diffattn::require<diffattn::OptionError>(false, "odr: expected");
        return 1;
    } catch (const diffattn::Error&) {
    }
    std::printf("odr: diffattn %s, 3 translation units linked\n", here.c_str());
    return 0;
}
