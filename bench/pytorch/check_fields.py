"""Check the PyTorch side's model fields against cformer's one list of them.

cformer's model config is defined once, in models/model_config_fields.h (every field: name,
kind, range, default, flag). The PyTorch twin copies part of it: models.py's Config (fields
and defaults, the sharing modes, the attention kinds, the layer limit) and
check_equivalence.py's config_from_cformer (which fields of a saved config it reads, and
NOT_READ: those it does not, with why). This script parses the C header and the two Python
files as text (no torch needed) and fails, naming the field, when they disagree: a field
renamed or added on one side, a default changed on one side only, a C field neither read nor
listed as not read.

    python3 bench/pytorch/check_fields.py [--src DIR]   (DIR: the source tree, default ..)

Exit status 0 when everything agrees, 1 with one line per disagreement otherwise.
"""

import argparse
import ast
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY_ONLY = {"attention_impl"}  # Config fields of the PyTorch side alone
PY_TO_C = {"k": "k_first"}  # Config's one k is cformer's k_first
LEGACY = {"no_positions", "learned_positions"}  # older configs' keys, read by both sides


def c_fields(src):
    """{name: (kind, default text, metavar or None)} of model_config_fields.h, in order."""
    with open(os.path.join(src, "models", "model_config_fields.h")) as f:
        text = f.read()
    body = text[text.index("#define MODEL_CONFIG_FIELDS(X, a)") :]
    body = re.sub(r"/\*.*?\*/", " ", body, flags=re.S).replace("\\\n", " ")
    row = re.compile(
        r"X\(a,\s*[^,]+,\s*(\w+),\s*[^,]*,\s*(\w+),\s*\w+,\s*[^,]+,\s*[^,]+,\s*([^,]+),"
        r"\s*(NULL|\"[^\"]*\"),\s*(NULL|\"[^\"]*\")"
    )
    fields = {}
    for m in row.finditer(body):
        name, kind, default, _flag, metavar = (g.strip() for g in m.groups())
        fields[name] = (kind, default, None if metavar == "NULL" else metavar.strip('"'))
    if len(fields) < 10:
        sys.exit(f"check_fields: could read only {len(fields)} rows of model_config_fields.h")
    return fields


def c_constants(src):
    """MODEL_MAX_LAYERS and the attention kinds' names in enum order (nn/nn.h, nn/linformer.c)."""
    with open(os.path.join(src, "models", "models.h")) as f:
        max_layers = int(re.search(r"#define MODEL_MAX_LAYERS (\d+)", f.read()).group(1))
    with open(os.path.join(src, "nn", "nn.h")) as f:
        enum = re.search(r"enum nn_attn_kind \{(.*?)\}", f.read(), re.S).group(1)
    order = re.findall(r"\b(NN_ATTN_\w+)\b", re.sub(r"/\*.*?\*/", "", enum, flags=re.S))
    with open(os.path.join(src, "nn", "linformer.c")) as f:
        names = dict(re.findall(r"\[(NN_ATTN_\w+)\] = \"(\w+)\"", f.read()))
    return max_layers, [names[c] for c in order if c in names]


def c_default(kind, default, metavar):
    """A C default as the Python value it means."""
    if kind == "BOOL":
        return default == "1"
    if kind in ("INT", "SEED", "K"):
        return int(default)
    if kind == "DOUBLE":
        return float(default)
    if metavar:  # an enum by name: NN_SHARE_HEADWISE -> "headwise"
        for choice in metavar.split("|"):
            if default.endswith("_" + choice.upper()):
                return choice
    return default


def literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def py_config(src):
    """models.py: {field: default or None}, and its module constants."""
    with open(os.path.join(src, "bench", "pytorch", "models.py")) as f:
        tree = ast.parse(f.read())
    consts, fields = {}, {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            consts[node.targets[0].id] = literal(node.value)
        if isinstance(node, ast.ClassDef) and node.name == "Config":
            for item in node.body:
                if isinstance(item, ast.AnnAssign):
                    value = item.value
                    if isinstance(value, ast.Call) and value.keywords:  # field(default_factory=)
                        value = value.keywords[0].value.body
                    fields[item.target.id] = literal(value) if value is not None else None
    return fields, consts


def keys_read(src):
    """check_equivalence.py: the config keys its readers index (c["k"], c.get("k")), and NOT_READ."""
    with open(os.path.join(src, "bench", "pytorch", "check_equivalence.py")) as f:
        tree = ast.parse(f.read())
    read, not_read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in ("config_from_cformer", "positions_of"):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id == "c":
                    key = literal(sub.slice)
                    read.add(key)
                if isinstance(sub, ast.Compare) and isinstance(sub.left, ast.Constant):
                    read.add(sub.left.value)  # "positions" in c
                if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
                        and sub.func.attr == "get" and isinstance(sub.func.value, ast.Name)
                        and sub.func.value.id == "c"):
                    read.add(literal(sub.args[0]))
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "NOT_READ":
            not_read = set(literal(node.value))
    return read, not_read


def check(src):
    fields = c_fields(src)
    max_layers, kinds = c_constants(src)
    config, consts = py_config(src)
    read, not_read = keys_read(src)
    errors = []
    for name, default in config.items():
        cname = PY_TO_C.get(name, name)
        if name in PY_ONLY:
            continue
        if cname not in fields:
            errors.append(f"models.py Config.{name}: no such field in model_config_fields.h")
            continue
        kind, cdef, metavar = fields[cname]
        if default is None:
            continue
        if cname == "attention":  # ["standard"] * layers
            want = [kinds[int(cdef)]] * c_default("INT", fields["layers"][1], None)
        else:
            want = c_default(kind, cdef, metavar)
        if default != want:
            errors.append(f"models.py Config.{name} defaults to {default!r}, cformer's {cname} to {want!r}")
    sharings = tuple(fields["sharing"][2].split("|"))
    if consts.get("SHARINGS") != sharings:
        errors.append(f"models.py SHARINGS {consts.get('SHARINGS')} are not cformer's {sharings}")
    if not set(consts.get("KINDS") or ()) <= set(kinds):
        errors.append(f"models.py KINDS {consts.get('KINDS')}: not all among cformer's {kinds}")
    if consts.get("MAX_LAYERS") != max_layers:
        errors.append(f"models.py MAX_LAYERS {consts.get('MAX_LAYERS')} is not MODEL_MAX_LAYERS {max_layers}")
    for key in sorted(read - set(fields) - LEGACY):
        errors.append(f"check_equivalence.py reads '{key}', not a field of model_config_fields.h")
    for key in sorted(not_read - set(fields)):
        errors.append(f"check_equivalence.py NOT_READ lists '{key}', not a field of model_config_fields.h")
    for key in sorted(read & not_read):
        errors.append(f"check_equivalence.py reads '{key}' and lists it in NOT_READ")
    for key in fields:
        if key not in read and key not in not_read:
            errors.append(f"model_config_fields.h's {key}: check_equivalence.py neither reads it "
                          "nor lists it in NOT_READ")
    return errors, len(fields)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", default=os.path.dirname(os.path.dirname(HERE)),
                   help="the source tree (default: the one holding this script)")
    errors, n = check(p.parse_args().src)
    for e in errors:
        print("check_fields: " + e)
    if not errors:
        print(f"check_fields: the PyTorch side agrees with the {n} fields of model_config_fields.h")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
