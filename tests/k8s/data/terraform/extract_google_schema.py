"""Extract google_container_node_pool's argument tree from terraform-provider-google's Go source.

Run once per provider upgrade, from a checkout of the provider at a release tag:

    python extract_google_schema.py PROVIDER_CHECKOUT v7.45.0 > google_container_node_pool.json

It reads the SDKv2 schema literals of ``google/services/container/resource_container_node_pool.go``
and ``node_config.go`` (``"name": {Type: ..., Required: true, Elem: &schema.Resource{...}}``,
entries that call a ``schema...()`` function or name a ``var``), and writes for each argument
whether it is required, optional or computed only, and its nested block. An entry whose
definition is elsewhere (another package) is written as ``{"opaque": true}``: anything is accepted
under it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

SOURCES = (
    "google/services/container/resource_container_node_pool.go",
    "google/services/container/node_config.go",
)
_ENTRY = re.compile(r'"([a-z0-9_]+)":\s*')
_FUNC = re.compile(r"func (\w+)\(\) \*schema\.Schema \{")
_VAR = re.compile(r"var (\w+) = &schema\.Schema\{")


def _skip_string(text: str, i: int) -> int:
    quote = text[i]
    i += 1
    while text[i] != quote:
        i += 2 if quote == '"' and text[i] == "\\" else 1
    return i + 1


def _close(text: str, i: int) -> int:
    """Index after the brace that closes the one at ``i``, strings skipped."""
    depth = 0
    while True:
        c = text[i]
        if c in '"`':
            i = _skip_string(text, i)
            continue
        depth += (c == "{") - (c == "}")
        i += 1
        if depth == 0:
            return i


def _top_level(body: str) -> str:
    """``body`` with nested braces and strings blanked, so flags of inner entries are not read."""
    out, depth, i = [], 0, 0
    while i < len(body):
        c = body[i]
        if c in '"`':
            end = _skip_string(body, i)
            out.append(" " * (end - i))
            i = end
            continue
        depth += (c == "{") - (c == "}")
        out.append(c if depth <= 1 or c in "{}" else " ")
        i += 1
    return "".join(out)


class Extractor:
    def __init__(self, text: str) -> None:
        self.text = text
        opening = "&schema.Schema{"
        self.functions = {
            m.group(1): text.index(opening, m.end()) + len(opening) - 1 for m in _FUNC.finditer(text)
        }
        self.functions.update({m.group(1): m.end() - 1 for m in _VAR.finditer(text)})

    def schema_map(self, start: int) -> dict[str, Any]:
        """Arguments of the ``map[string]*schema.Schema{`` whose brace is at ``start``."""
        end = _close(self.text, start)
        out: dict[str, Any] = {}
        i = start + 1
        while i < end - 1:
            c = self.text[i]
            if c in "`":
                i = _skip_string(self.text, i)
                continue
            match = _ENTRY.match(self.text, i)
            if not match:
                i += 1
                continue
            j = match.end()
            if self.text[j] == "{":
                close = _close(self.text, j)
                out[match.group(1)] = self.entry(j)
                i = close
            else:
                ref = re.match(r"([\w.]+)(\(\))?", self.text[j:])
                assert ref is not None
                name = ref.group(1)
                out[match.group(1)] = (
                    self.entry(self.functions[name]) if name in self.functions else {"opaque": True}
                )
                i = j + len(ref.group(0))
        return out

    def entry(self, brace: int) -> dict[str, Any]:
        body = self.text[brace : _close(self.text, brace)]
        flat = _top_level(body)
        found: dict[str, Any] = {
            flag.lower(): True
            for flag in ("Required", "Optional", "Computed")
            if re.search(rf"\b{flag}:\s*true", flat)
        }
        kind = re.search(r"Type:\s*schema\.Type(\w+)", flat)
        found["type"] = kind.group(1).lower() if kind else "unknown"
        most = re.search(r"MaxItems:\s*(\d+)", flat)
        if most:
            found["max_items"] = int(most.group(1))
        nested = re.search(r"Elem:\s*&schema\.Resource\{\s*Schema:\s*map\[string\]\*schema\.Schema\{", body)
        if nested:
            found["block"] = self.schema_map(brace + nested.end() - 1)
        else:
            nested_fn = re.search(r"Elem:\s*&schema\.Resource\{\s*Schema:\s*(\w+)\(\)", body)
            if nested_fn:
                found["block"] = {"opaque": True}
        return found


def resource_schema(checkout: Path) -> dict[str, Any]:
    text = "\n".join((checkout / source).read_text() for source in SOURCES)
    extractor = Extractor(text)
    head = "var schemaNodePool = map[string]*schema.Schema{"
    pool = extractor.schema_map(text.index(head) + len(head) - 1)
    merged = text.index("map[string]*schema.Schema{", text.index("schemaNodePool,\n"))
    pool.update(extractor.schema_map(merged + len("map[string]*schema.Schema")))
    return dict(sorted(pool.items()))


if __name__ == "__main__":
    checkout, version = Path(sys.argv[1]), sys.argv[2]
    document = {
        "provider": "hashicorp/google",
        "version": version,
        "source": "github.com/hashicorp/terraform-provider-google: " + ", ".join(SOURCES),
        "license": "MPL-2.0",
        "resource": "google_container_node_pool",
        "arguments": resource_schema(checkout),
    }
    json.dump(document, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
