// ODR check, TU 1 of 3: includes the umbrella header and instantiates a little of it.
// If a header defines a non-inline function or variable, linking odr_a, odr_b and odr_main
// together fails with a duplicate symbol.
#include <diffattn/diffattn.hpp>

#include <string>

namespace odr {

std::string version_from_a() { return diffattn::version; }

double sum_from_a() {
    diffattn::RowMatrix<double> m = diffattn::RowMatrix<double>::Constant(2, 3, 1.0);  // [2 x 3]
    diffattn::require<diffattn::ShapeError>(m.rows() == 2, "odr_a: m is ", diffattn::detail::shape_of(m));
    return m.sum();
}

}  // namespace odr
