// ODR check, TU 2 of 3: the same headers and the same instantiations as odr_a.cpp.
#include <diffattn/diffattn.hpp>

#include <string>

namespace odr {

std::string version_from_b() { return diffattn::version; }

double sum_from_b() {
    diffattn::RowMatrix<double> m = diffattn::RowMatrix<double>::Constant(3, 2, 2.0);  // [3 x 2]
    diffattn::require<diffattn::ShapeError>(m.cols() == 2, "odr_b: m is ", diffattn::detail::shape_of(m));
    return m.sum();
}

}  // namespace odr
