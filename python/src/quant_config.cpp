#include "quant_config.hpp"

namespace qjit_python {

namespace nb = nanobind;

qjit_quant_config quant_config(const nb::dict& fields) {
    qjit_quant_config c;
    qjit_quant_config_init(&c);
    c.bits = nb::cast<int>(fields["bits"]);
    c.group_size = nb::cast<int>(fields["group_size"]);
    c.symmetric = nb::cast<bool>(fields["symmetric"]);
    c.scale_dtype = qjit_dtype(nb::cast<int>(fields["scale_dtype"]));
    c.method = qjit_quant_method(nb::cast<int>(fields["method"]));
    c.rank = nb::cast<int>(fields["rank"]);
    c.low_rank_bits = nb::cast<int>(fields["low_rank_bits"]);
    c.act_order = nb::cast<bool>(fields["act_order"]);
    c.damp = nb::cast<double>(fields["damp"]);
    c.mixed_alpha = nb::cast<double>(fields["mixed_alpha"]);
    c.outlier_fraction = nb::cast<double>(fields["outlier_fraction"]);
    c.second_order_scales = nb::cast<bool>(fields["second_order_scales"]);
    c.float_offsets = fields["float_offsets"].is_none() ? QJIT_FLOAT_OFFSETS_BY_METHOD
                                                         : int(nb::cast<bool>(fields["float_offsets"]));
    c.milo_base = nb::cast<int>(fields["milo_base"]);
    c.mixed_bits_per_weight = nb::cast<double>(fields["mixed_bits_per_weight"]);
    return c;
}

nb::dict default_quant_config() {
    qjit_quant_config c;
    qjit_quant_config_init(&c);
    nb::dict d;
    d["bits"] = c.bits;
    d["group_size"] = c.group_size;
    d["symmetric"] = bool(c.symmetric);
    d["scale_dtype"] = int(c.scale_dtype);
    d["method"] = int(c.method);
    d["rank"] = c.rank;
    d["low_rank_bits"] = c.low_rank_bits;
    d["act_order"] = bool(c.act_order);
    d["damp"] = c.damp;
    d["mixed_alpha"] = c.mixed_alpha;
    d["outlier_fraction"] = c.outlier_fraction;
    d["second_order_scales"] = bool(c.second_order_scales);
    d["float_offsets"] = nb::none();  // QJIT_FLOAT_OFFSETS_BY_METHOD: the method's measured choice
    d["milo_base"] = c.milo_base;
    d["mixed_bits_per_weight"] = c.mixed_bits_per_weight;
    return d;
}

}  // namespace qjit_python
