"""Validates spacetime's JSON outputs against their published schemas (docs/*.schema.json),
and checks that the schema describes every key they hold (the schema's objects are open for
readers, so a key missing from it would otherwise pass unnoticed).

Usage: check_report.py SCHEMA [--lines] FILE...  With --lines each line of each FILE is one
document (watch --json). Prints nothing and exits 0 when all is well."""
import json
import sys

import jsonschema


def resolve(node, root):
    while "$ref" in node:
        path = node["$ref"].lstrip("#/").split("/")
        node = root
        for p in path:
            node = node[p]
    return node


def undocumented(instance, node, root, validator, where, out):
    node = resolve(node, root)
    for key in ("anyOf", "oneOf"):
        for branch in node.get(key, []):
            # Evolved from the full validator, so the branch's $refs resolve.
            if validator.evolve(schema=branch).is_valid(instance):
                undocumented(instance, branch, root, validator, where, out)
                break
    if isinstance(instance, dict) and "properties" in node:
        for k, v in instance.items():
            if k not in node["properties"]:
                out.add(f"{where}.{k}")
            else:
                undocumented(v, node["properties"][k], root, validator, f"{where}.{k}", out)
    if isinstance(instance, list) and "items" in node:
        for v in instance:
            undocumented(v, node["items"], root, validator, f"{where}[]", out)


def main():
    schema = json.load(open(sys.argv[1]))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    files = sys.argv[2:]
    lines = files[:1] == ["--lines"]
    failed = False
    for path in files[1:] if lines else files:
        if lines:
            docs = [(f"{path}:{i + 1}", json.loads(l)) for i, l in enumerate(open(path)) if l.strip()]
        else:
            docs = [(path, json.load(open(path)))]
        for where, doc in docs:
            for e in validator.iter_errors(doc):
                print(f"{where}: {e.json_path}: {e.message[:300]}")
                failed = True
            missing = set()
            undocumented(doc, schema, schema, validator, "$", missing)
            for k in sorted(missing):
                print(f"{where}: {k} is not described by the schema")
                failed = True
    sys.exit(1 if failed else 0)


main()
