"""Block-causal diffusion LMs (SDAR, LLaDA 2.x, Fast-dLLM v2): causal across blocks, bidirectional inside one.

A block diffusion model cuts the sequence into blocks of ``block`` positions counted from position 0 (the prompt
included). A position attends to every position of its own block and of the blocks before it, never to a later
block; the model decodes one block at a time, and once a block is written its keys and values never change again,
so they are kept exactly, as an autoregressive model keeps its past. This module holds what the project needs to
drive them, read from each release's published code:

- ``release_of(config)``: which release a checkpoint is, from its config's ``model_type`` / ``architectures``, and its
  block size from the config (``BlockRelease``);
- ``block_causal_mask``: the attention mask their generate code builds (SDAR's ``block_diffusion_generate``: the
  lower triangle of a blocks x blocks matrix, each entry spread over block x block positions);
- ``block_forward``: a pass over the whole sequence under that mask (no cache), or a cached pass (``BlockCache``):
  the finished blocks' keys and values kept in the model's own ``DynamicCache`` exactly as SDAR's generate keeps
  them (a prefill pass over the prompt's whole blocks, one storing pass over each block once it is written), and
  each denoising pass computing the current block only against them;
- a driver per release (``BlockDriver``): how its own forward is called, the only release-specific code on the
  decoding path (a preset that keeps its release's caches its own way registers them in ``OWN_CACHES``:
  ``dico.fast_dllm_v2``);
- ``release_imports()``: the fallbacks a CPU needs to import the releases' code unchanged: ``flash_attn`` (a CUDA-only
  package their files import unconditionally), ``einops`` (Fast-dLLM v2's file imports it, unused at inference) and
  ``transformers.utils.LossKwargs`` (gone in transformers 4.56+), present only while their code is imported; a user's
  downloaded files are never edited;
- ``check_block_request`` and ``response_length``: what a decode on such a model may ask (semi-AR, one model block a
  window) and how long its response is (to the end of the block holding ``gen_length``, as SDAR's generate does).

The windows of a decode follow the model's blocks at their absolute positions: the first window holds the response
positions of the block the prompt ends in (all of a block when the prompt fills whole blocks), the next ones a block
each (``first_window_end``).
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import sys
import types
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

BLOCK_KIND = "block"


class BlockDriver:
    """How the project calls one release's own forward: the only release-specific code on the decoding path.

    ``whole``: logits (b, l, v) of one pass over the whole sequence under ``mask`` (b, 1, l, l bool: the block-causal
    mask, padded keys hidden). ``call``: logits (1, w, v) of ``ids`` (1, w) at positions ``offset`` .. ``offset + w``
    attending to what ``past`` (the model's own cache object, made by ``new_past``) holds and to themselves under
    ``mask`` (1, w, stored + w bool); with ``store`` their keys and values are appended to ``past``, without it
    ``past`` is left as it was."""

    def new_past(self):
        from transformers.cache_utils import DynamicCache
        return DynamicCache()

    def whole(self, model, ids, mask, positions):
        raise NotImplementedError

    def call(self, model, ids, mask, offset: int, past, store: bool):
        raise NotImplementedError


class SDARDriver(BlockDriver):
    """SDAR's ``modeling_sdar.py`` (JetAstra/SDAR, MIT): a bool mask, ``position_ids``, and its ``store_kv`` switch
    saying whether a cached call appends its keys and values (``block_diffusion_generate``'s two kinds of pass)."""

    def whole(self, model, ids, mask, positions):
        return model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits

    def call(self, model, ids, mask, offset, past, store):
        positions = torch.arange(offset, offset + ids.shape[1], device=ids.device)[None]
        return model(ids, attention_mask=mask, position_ids=positions, past_key_values=past, use_cache=True,
                     store_kv=store).logits


class LLaDA2Driver(BlockDriver):
    """LLaDA 2.x's ``modeling_llada2_moe.py`` (inclusionAI's LLaDA2.0 / 2.1 model cards, as ZHZisZZ/dllm carries them,
    Apache-2.0): its generate hands the forward a 4-D additive float mask (the block mask's ``.log()``: 0 where a
    query sees a key, -inf elsewhere; its SDPA path passes a 4-D mask through unchanged) and ``position_ids``. Its
    attention appends every call's keys and values to ``past_key_values`` (it has no switch like SDAR's), so a call
    that must not store is cropped back afterwards. Its generate keeps no cache at all (every pass recomputes the
    finished blocks, which block causality leaves unchanged); kept here, they are exact.

    The mask is built in the model's dtype (its generate casts to bfloat16, the released weights' dtype, which SDPA
    needs the mask to match), with the dtype's lowest value for -inf, as transformers builds a 4-D mask: a row that
    sees any key weighs each key as with -inf, and a padded row that sees none stays finite. Its eager path would
    read a 4-D mask as 0/1 and invert it (its generate's mask too), so the model runs with SDPA, transformers' default
    for it."""

    def whole(self, model, ids, mask, positions):
        return model(input_ids=ids, attention_mask=self._additive(model, mask), position_ids=positions,
                     use_cache=False).logits

    def call(self, model, ids, mask, offset, past, store):
        positions = torch.arange(offset, offset + ids.shape[1], device=ids.device)[None]
        before = past.get_seq_length()
        logits = model(input_ids=ids, attention_mask=self._additive(model, mask[:, None]), position_ids=positions,
                       past_key_values=past, use_cache=True).logits
        if not store:
            past.crop(before)
        return logits

    @staticmethod
    def _additive(model, mask: torch.Tensor) -> torch.Tensor:
        """(b, 1, q, k) bool -> that shape in the model's dtype: 0 where seen, the dtype's lowest value elsewhere."""
        dtype = model.dtype
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


class FastDLLMv2Driver(BlockDriver):
    """Fast-dLLM v2's ``modeling.py`` (NVlabs/Fast-dLLM ``v2/``, the model card Efficient-Large-Model/Fast_dLLM_v2_7B;
    Apache-2.0). Its forward ignores any mask it is given and builds the block-causal one itself from its
    ``block_size`` argument (32 unless given; passed here as the config's ``bd_size``) and the stored length, numbers
    positions from the stored length, and appends a call's keys and values when ``update_past_key_values`` is set.
    Its logits are an AR model's, ``logits[i]`` predicting position i + 1; aligned here, position i takes those of
    i - 1, and a call's first position those of the last position stored before it (its generate decodes a block's
    first token from the pass that stored the block before), or its own where none is at hand (its generate's shift
    inside a block). A batch whose rows are padded is refused: the mask it would need cannot be handed over."""

    def new_past(self):
        past = super().new_past()
        past.next_logits, past.next_at = None, -1       # the last stored position's logits, and where they point
        return past

    def whole(self, model, ids, mask, positions):
        block = model.config.bd_size
        if not torch.equal(mask, block_causal_mask(ids.shape[1], block, mask.device).expand_as(mask)):
            raise ValueError("batch: Fast-dLLM v2's forward builds its own attention mask, so prompts of different "
                             "lengths cannot share a padded batch; decode them one by one")
        raw = model(input_ids=ids, position_ids=positions, use_cache=False, block_size=block).logits
        return torch.cat([raw[:, :1], raw[:, :-1]], dim=1)

    def call(self, model, ids, mask, offset, past, store):
        raw = model(input_ids=ids, past_key_values=past, use_cache=True, update_past_key_values=store,
                    block_size=model.config.bd_size).logits
        first = past.next_logits if past.next_at == offset else raw[:, :1]
        if store:
            past.next_logits, past.next_at = raw[:, -1:], offset + ids.shape[1]
        return torch.cat([first, raw[:, :-1]], dim=1)


@dataclass(frozen=True)
class BlockRelease:
    """One family of block diffusion checkpoints: how its config names it, where its block size is, and the driver
    that calls its code (None: recognised, not driven yet, and ``why_not`` says why)."""
    name: str
    markers: tuple          # lower-case substrings of the config's model_type / architectures
    block_key: str | None   # the config entry holding the block size
    default_block: int      # the block its generate code uses when the config names none
    driver: BlockDriver | None
    why_not: str = ""

    @property
    def driven(self) -> bool:
        return self.driver is not None


RELEASES = (
    BlockRelease("SDAR", ("sdar",), "block_size", 4, SDARDriver()),
    # its config names no block size (LLaDA2.0-mini / 2.1-mini): its generate's block_length default, 32
    BlockRelease("LLaDA 2.x", ("llada2",), None, 32, LLaDA2Driver()),
    BlockRelease("Fast-dLLM v2", ("fast_dllm",), "bd_size", 32, FastDLLMv2Driver()),
)
SDAR = RELEASES[0]


def release_of(config: dict) -> BlockRelease | None:
    """The block diffusion release a config describes, or None for any other model."""
    text = " ".join([str(config.get("model_type", ""))] + list(config.get("architectures") or [])).lower()
    return next((r for r in RELEASES if any(m in text for m in r.markers)), None)


def block_size_of(config: dict, release: BlockRelease) -> int:
    """The model's block size: its config's entry, else its generate code's default."""
    value = config.get(release.block_key) if release.block_key else None
    block = release.default_block if value is None else value
    if not isinstance(block, int) or isinstance(block, bool) or block < 1:
        raise ValueError(f"{release.block_key}: the config's block size must be a whole number >= 1, got {value!r}")
    return block


def block_causal_mask(length: int, block: int, device=None) -> torch.Tensor:
    """(length, length) bool: query i sees key j when j's block is i's or an earlier one (blocks from position 0)."""
    index = torch.arange(length, device=device) // block
    return index[:, None] >= index[None, :]


def first_window_end(prompt_length: int, block: int) -> int:
    """Response offset where the first model block ends: the rest of the block the prompt ends in."""
    return block - prompt_length % block


def response_length(prompt_length: int, gen_length: int, block: int) -> int:
    """The response a decode writes: ``gen_length`` rounded up to the end of its last block, as SDAR's generate
    decodes whole blocks (its ``total_length``)."""
    return gen_length + (-(prompt_length + gen_length)) % block


def check_block_request(predictor, mode: str, block_length: int | None, gen_length) -> None:
    """What a decode on a block-causal model may ask, checked before anything runs (ValueError naming the field)."""
    block, label = predictor.block, predictor.name
    if mode != "semi-ar":
        raise ValueError(f"mode: {label!r} is a block diffusion model (blocks of {block}, each sees only the blocks "
                         f"before it), so it cannot decode the whole response at once; use mode semi-ar with "
                         f"block_length {block}")
    if block_length not in (None, block):
        raise ValueError(f"block_length: {label!r} decodes blocks of {block} (its config's block size), so a window "
                         f"must be one block; set block_length to {block}")
    if not isinstance(gen_length, int):
        raise ValueError(f"gen_length: {label!r} is a block diffusion model; give a number (the response runs to the "
                         "end of its last block), not 'auto'")


# ------------------------------------------------------------------------------------------- passes

def block_forward(predictor, ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                  cache_rows: list | None = None):
    """Logits (b, l, v) of a block-causal model, aligned to positions (position i at [i]); no attention maps.

    Without a cache: one pass over the whole sequence under ``block_causal_mask`` (a padded batch's padding keys
    hidden too). With ``cache_rows`` (one ``(BlockStore, positions)`` row): the cached pass of ``BlockStore``."""
    if cache_rows is not None:
        if len(cache_rows) != 1:
            raise ValueError("cache: a block diffusion model's cache serves one sequence at a time; decode the "
                             "prompts one by one or set cache to none")
        store, positions = cache_rows[0]
        return store.forward(predictor, ids, positions), None
    b, l = ids.shape
    device = predictor.device
    mask = block_causal_mask(l, predictor.block, device)[None, None].expand(b, 1, l, l)       # b, 1, l, l
    if attention_mask is not None:
        mask = mask & predictor.to_model(attention_mask).bool()[:, None, None, :]
    positions = torch.arange(l, device=device)[None].expand(b, l)
    return predictor.release.driver.whole(predictor.model, predictor.to_model(ids), mask, positions), None


@dataclass
class BlockStore:
    """One sequence's finished blocks: their keys and values in the model's own ``DynamicCache`` (positions
    [0, ``stored``)), and the logits last computed at every position (l, v), on the model's device."""
    past: object = None
    stored: int = 0
    logits: torch.Tensor | None = None
    computed: int = 0           # positions the last pass put through the model (stored ones included)

    def drop_from(self, position: int) -> None:
        """Forget the keys and values from ``position`` on (a token there was taken back or rewritten)."""
        if self.past is not None and self.stored > position:
            self.past.crop(position)
            self.stored = position

    def forward(self, predictor, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits (1, l, v) after computing ``positions`` (one block, ascending) against the stored blocks. First the
        blocks before it that are written and not yet stored are stored as SDAR's generate stores them: the prompt's
        whole blocks in one prefill pass under the block-causal mask, every later block in a pass of its own."""
        device = predictor.device
        start, end = int(positions[0]), int(positions[-1]) + 1
        ids = predictor.to_model(ids)
        self.computed = end - start
        self.store_before(predictor, ids, start)
        mask = torch.ones(1, end - start, end, dtype=torch.bool, device=device)
        logits = self._call(predictor, ids[:, start:end], mask, start, store=False)                # 1, w, v
        if self.logits is None or self.logits.shape[0] != ids.shape[1]:
            self.logits = logits.new_zeros(ids.shape[1], logits.shape[-1])
        self.logits[start:end] = logits[0]
        return self.logits[None]

    def store_before(self, predictor, ids: torch.Tensor, start: int) -> None:
        """Keep the keys and values of every position before ``start`` (a block boundary): what is stored from
        ``start`` on is forgotten, then the written blocks not stored yet are stored as SDAR's generate stores them
        (the prompt's whole blocks in one prefill pass under the block-causal mask, every later block in a pass of its
        own); ``computed`` counts the positions those passes put through the model."""
        block, device = predictor.block, predictor.device
        if self.past is None:
            self.past = predictor.release.driver.new_past()
        self.drop_from(start)
        if self.stored == 0 and start > 0:                                    # prefill
            mask = block_causal_mask(start, block, device)[None]                                   # 1, s, s
            self._call(predictor, ids[:, :start], mask, 0, store=True)
            self.computed += start
            self.stored = start
        while self.stored < start:                                            # each written block, stored once
            to = min(self.stored + block, start)
            mask = torch.ones(1, to - self.stored, to, dtype=torch.bool, device=device)
            self._call(predictor, ids[:, self.stored:to], mask, self.stored, store=True)
            self.computed += to - self.stored
            self.stored = to

    def _call(self, predictor, ids, mask, offset: int, store: bool):
        return predictor.release.driver.call(predictor.model, ids, mask, offset, self.past, store)


@dataclass
class BlockCache:
    """One decode's exact cache on a block-causal model (``settings.cache`` "prefix": everything before the current
    block). Each pass computes the current block; the blocks before it are stored once each. The same interface as
    ``dico.cache.Cache`` for the loop: ``plan``, ``taken_back``, ``positions``, ``refreshed``, ``token_forwards``."""
    block: int
    m: int
    n: int
    stores: list = field(default_factory=lambda: [BlockStore()])
    positions: torch.Tensor = field(default_factory=lambda: torch.arange(0))
    refreshed: bool = False
    window: tuple | None = None

    def plan(self, masked: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
        """This pass's positions: the model block of ``window`` (the prompt's tail too in the first block)."""
        start = self.m + window[0]
        start -= start % self.block
        self.refreshed = self.window != tuple(window)        # a new block: the finished ones are stored first
        self.window = tuple(window)
        self.positions = torch.arange(start, self.m + window[1])
        return self.positions

    def taken_back(self, positions: torch.Tensor) -> None:
        """Tokens taken back or rewritten at these response offsets: the stored blocks from the earliest one on are
        recomputed when next needed."""
        if positions.numel():
            first = self.m + int(positions.min())
            self.stores[0].drop_from(first - first % self.block)

    @property
    def token_forwards(self) -> int:
        return self.stores[0].computed if self.stores[0].computed else int(self.positions.numel())


# A preset's own caches on its release's model, by method: (predictor, settings, prompt_length, gen_length) -> the
# cache the loop drives (``dico.fast_dllm_v2`` adds ``fast-v2``'s block and sub-block caches).
OWN_CACHES: dict = {}


def block_cache_for(predictor, settings, prompt_length: int, gen_length: int) -> BlockCache | None:
    """The cache a decode on a block-causal model asks for: none, or ``prefix`` (the finished blocks, exact)."""
    if settings.cache == "none":
        return None
    own = OWN_CACHES.get(getattr(settings, "method", None))
    if own is not None:                       # a preset that keeps its release's caches as its generate does
        return own(predictor, settings, prompt_length, gen_length)
    if settings.cache != "prefix":
        raise ValueError(f"cache: {predictor.name!r} is a block diffusion model: its finished blocks' keys and values "
                         "are exact and later blocks are never seen, so its one cache is prefix (or none); "
                         f"{settings.cache} has nothing to add")
    if settings.cfg_scale:
        raise ValueError("cfg_scale: a block diffusion model's cache keeps one sequence; set cfg_scale to 0 or "
                         "cache to none")
    return BlockCache(predictor.block, prompt_length, gen_length)


# ------------------------------------------------------------------------------------------- import fallbacks

def _rms_norm_fn(x, weight, bias=None, residual=None, eps=1e-6, **kwargs):
    """flash-attn's fused RMS norm (``flash_attn.ops.triton.layer_norm.rms_norm_fn``) on any device: normalised and
    scaled in float32, returned in the input's dtype. Only the plain form (no residual, no dropout) is served."""
    if residual is not None or kwargs.get("prenorm") or kwargs.get("dropout_p", 0.0):
        raise NotImplementedError("rms_norm_fn with a residual or dropout needs the flash-attn package (CUDA)")
    y = x.float()
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(kwargs.get("out_dtype") or x.dtype)


def _flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), **kwargs):
    """``flash_attn_func`` on any device: q (b, lq, h, d), k and v (b, lk, kv, d) with kv dividing h; causal as
    flash-attn aligns it (to the bottom right when lq < lk). Returns (b, lq, h, d)."""
    if dropout_p or tuple(window_size) != (-1, -1) or kwargs.get("alibi_slopes") is not None:
        raise NotImplementedError("flash_attn_func with dropout, a window or ALiBi needs the flash-attn package (CUDA)")
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))                                      # b, h, l, d
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    mask = None
    if causal:
        lq, lk = q.shape[2], k.shape[2]
        mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(lk - lq)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=softmax_scale)
    return out.transpose(1, 2)


def _needs_flash(*args, **kwargs):
    raise NotImplementedError("this path of the model's code needs the flash-attn package (CUDA); on a CPU the "
                              "project serves only flash_attn_func and rms_norm_fn")


def _flash_modules() -> dict:
    """Stand-in ``flash_attn`` modules with the functions the releases import."""
    names = ("flash_attn", "flash_attn.ops", "flash_attn.ops.triton", "flash_attn.ops.triton.layer_norm",
             "flash_attn.bert_padding", "flash_attn.flash_attn_interface")
    modules = {name: types.ModuleType(name) for name in names}
    for name, module in modules.items():
        module.__dict__["__path__"] = []                   # importable as a package
        module.__dict__["__spec__"] = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module.__dict__["__version__"] = "0.0-dico-fallback"
    for module in (modules["flash_attn"], modules["flash_attn.flash_attn_interface"]):
        module.flash_attn_func = _flash_attn_func
        module.flash_attn_varlen_func = _needs_flash
    modules["flash_attn.ops.triton.layer_norm"].rms_norm_fn = _rms_norm_fn
    for fn in ("index_first_axis", "pad_input", "unpad_input"):
        setattr(modules["flash_attn.bert_padding"], fn, _needs_flash)
    return modules


def _needs_einops(*args, **kwargs):
    raise NotImplementedError("this path of the model's code needs the einops package; the project serves only "
                              "its import")


def _einops_module() -> types.ModuleType:
    """Stand-in ``einops`` with ``rearrange`` and ``repeat``: Fast-dLLM v2's file imports them and never calls them
    at inference."""
    module = types.ModuleType("einops")
    module.__dict__["__spec__"] = importlib.machinery.ModuleSpec("einops", None)
    module.__dict__["__version__"] = "0.0-dico-fallback"
    module.rearrange = module.repeat = _needs_einops
    return module


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def release_imports():
    """While a release's code is imported: ``flash_attn`` and ``einops`` when they are not installed, and
    ``LossKwargs`` in ``transformers.utils`` when this transformers has none (an empty keyword ``TypedDict``, as it
    was). All are removed again afterwards; the model's modules keep the functions they imported."""
    import transformers.utils as hf_utils
    from typing_extensions import TypedDict

    added = {}
    if not _installed("flash_attn"):
        added = {k: v for k, v in _flash_modules().items() if k not in sys.modules}
    if not _installed("einops") and "einops" not in sys.modules:
        added["einops"] = _einops_module()
    sys.modules.update(added)
    loss = not hasattr(hf_utils, "LossKwargs")
    if loss:
        hf_utils.LossKwargs = TypedDict("LossKwargs", {"num_items_in_batch": object}, total=False)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)
        if loss:
            del hf_utils.LossKwargs
