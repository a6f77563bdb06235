"""What the dispatcher needs to know about an aten overload, from its schema:
how each argument takes part in a kernel (tensor read, traced scalar, static
value, generator), which arguments it mutates, and what its returns alias.
Computed once per overload."""

TENSOR = "tensor"
OPT_TENSOR = "opt_tensor"
TENSOR_LIST = "tensor_list"
OPT_TENSOR_LIST = "opt_tensor_list"
SCALAR = "scalar"  # traced: changing its value does not recompile
SCALAR_LIST = "scalar_list"
GENERATOR = "generator"
STATIC = "static"  # part of the cache key

_TENSOR_KINDS = (TENSOR, OPT_TENSOR, TENSOR_LIST, OPT_TENSOR_LIST)


def _kind(arg_type) -> str:
    kind = arg_type.kind()
    if kind == "OptionalType":
        inner = arg_type.getElementType()
        inner_kind = inner.kind()
        if inner_kind == "TensorType":
            return OPT_TENSOR
        if inner_kind == "NumberType":
            return SCALAR
        if inner_kind == "GeneratorType":
            return GENERATOR
        if inner_kind == "ListType" and inner.getElementType().kind() == "TensorType":
            return TENSOR_LIST
        return STATIC
    if kind == "TensorType":
        return TENSOR
    if kind == "NumberType":
        return SCALAR
    if kind == "GeneratorType":
        return GENERATOR
    if kind == "ListType":
        elem = arg_type.getElementType()
        if elem.kind() == "TensorType":
            return TENSOR_LIST
        if elem.kind() == "OptionalType" and elem.getElementType().kind() == "TensorType":
            return OPT_TENSOR_LIST
        if elem.kind() == "NumberType":
            return SCALAR_LIST
    return STATIC


class OpSchema:
    """Argument kinds, defaults, mutations and return aliasing of one overload."""

    __slots__ = (
        "op",
        "names",
        "kinds",
        "defaults",
        "kwarg_only",
        "name_to_index",
        "mutated",
        "return_alias",
        "return_is_list",
        "has_generator",
        "num_returns",
        "is_view",
        "lowering_positions",
    )

    def __init__(self, op):
        schema = op._schema
        self.op = op
        args = schema.arguments
        self.names = [a.name for a in args]
        self.kinds = [_kind(a.type) for a in args]
        self.defaults = [a.default_value if a.has_default_value() else None for a in args]
        self.kwarg_only = [a.kwarg_only for a in args]
        self.name_to_index = {a.name: i for i, a in enumerate(args)}
        self.mutated = [i for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write]
        # A lowering sees the functional signature: out= arguments are not passed.
        self.lowering_positions = [i for i, a in enumerate(args) if not a.is_out]
        alias_sets = {}
        for i, a in enumerate(args):
            if a.alias_info is not None:
                for name in a.alias_info.before_set:
                    alias_sets[name] = i
        self.return_alias = []
        self.return_is_list = []
        self.is_view = False
        for r in schema.returns:
            target = None
            if r.alias_info is not None:
                target = alias_sets.get(next(iter(r.alias_info.before_set), None), None)
                if not r.alias_info.is_write:
                    self.is_view = True
            self.return_alias.append(target)
            self.return_is_list.append(r.type.kind() == "ListType")
        self.num_returns = len(schema.returns)
        self.has_generator = GENERATOR in self.kinds

    def normalize(self, args, kwargs):
        """All arguments, positionally, with defaults filled in."""
        n = len(args)
        if n == len(self.names):
            return list(args)
        values = list(args)
        for i in range(n, len(self.names)):
            values.append(kwargs.get(self.names[i], self.defaults[i]))
        return values

    def split(self, values):
        """Inverse of normalize: (args, kwargs) as the op is called in Python."""
        args = []
        kwargs = {}
        for i, v in enumerate(values):
            if self.kwarg_only[i]:
                kwargs[self.names[i]] = v
            else:
                args.append(v)
        return args, kwargs


_schemas = {}


def schema_of(op) -> OpSchema:
    s = _schemas.get(op)
    if s is None:
        s = _schemas[op] = OpSchema(op)
    return s


def is_tensor_kind(kind) -> bool:
    return kind in _TENSOR_KINDS
