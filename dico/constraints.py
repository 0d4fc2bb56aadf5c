"""Words fixed before a decode starts (docs/decoding.md §8): constraints, as LLaDA's demo takes them
("0:The,5:leader"), and the forced tokens of a fork, encoded by the model's tokenizer into fixed positions.

    trace = dico.generate(predictor, prompt, "topk", constraints={0: "The", 3: "leader"})

The loop fixes these positions before its first step; no rule commits or takes them back. This module sits below
the loop (``dico.loop`` imports it); forks, which drive the loop, are ``dico.forking``.
"""
from __future__ import annotations

MAX_EDITS = 64


def parse_constraints(text: str) -> dict[int, str]:
    """LLaDA's demo syntax, "0:Once, 5:upon" -> {0: "Once", 5: "upon"} (ValueError naming ``constraints``)."""
    out: dict[int, str] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        offset, sep, word = part.partition(":")
        if not sep or not offset.strip().lstrip("-").isdigit() or not word.strip():
            raise ValueError(f"constraints: {part!r} is not offset:word (e.g. 0:The, 5:leader)")
        if int(offset) in out:
            raise ValueError(f"constraints: offset {int(offset)} is given twice")
        out[int(offset)] = word.strip()
    return out


def encode_fixed(predictor, given: dict, gen_length: int, field: str = "constraints") -> dict[int, int]:
    """{response offset: word or token id} -> {position: token id}: a word is encoded by the model's tokenizer and
    fills consecutive positions from its offset. Errors name ``field``: an offset outside the response, a word that
    encodes to nothing, pieces that overflow the response or overlap another's."""
    if not isinstance(given, dict):
        raise ValueError(f"{field}: must map response offsets to words or token ids")
    if len(given) > MAX_EDITS:
        raise ValueError(f"{field}: at most {MAX_EDITS} positions, got {len(given)}")
    fixed: dict[int, int] = {}
    for offset, value in sorted(given.items(), key=lambda kv: int(kv[0]) if str(kv[0]).lstrip("-").isdigit() else 0):
        pos = response_position(offset, gen_length, field)
        pieces = _pieces(predictor, value, field, pos)
        if pos + len(pieces) > gen_length:
            raise ValueError(f"{field}: {value!r} at {pos} needs {len(pieces)} positions and overflows the response "
                             f"({gen_length} positions)")
        for i, token in enumerate(pieces):
            if pos + i in fixed:
                raise ValueError(f"{field}: {value!r} at {pos} overlaps another word at {pos + i}")
            fixed[pos + i] = token
    return fixed


def response_position(offset, gen_length: int, field: str) -> int:
    try:
        pos = int(offset)
    except (TypeError, ValueError):
        raise ValueError(f"{field}: {_noun(field)} {offset!r} is not a whole number") from None
    if isinstance(offset, bool) or not 0 <= pos < gen_length or str(pos) != str(offset).strip():
        raise ValueError(f"{field}: {_noun(field)} {offset!r} lies outside the response (0..{gen_length - 1})")
    return pos


def _noun(field: str) -> str:
    return "offset" if field == "constraints" else "position"


def _pieces(predictor, value, field: str, pos: int) -> list[int]:
    """A token id as it is (checked against the vocabulary), or a word's pieces."""
    vocab = len(predictor.tokenizer)
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < vocab or value == predictor.mask_id:
            raise ValueError(f"{field}: token id {value} at {pos} is not a token of the model (0..{vocab - 1}, "
                             "not the mask)")
        return [value]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field}: the word at {pos} is empty")
    pieces = predictor.encode_word(value)
    if not pieces:
        raise ValueError(f"{field}: {value!r} at {pos} encodes to no token")
    return pieces
