"""Judges of step 10: the online softmax and attention over blocks of keys (FlashAttention's algorithm).

Known mistakes are recognised by running the checks with the student's function replaced by a mistaken one written
here (`mistake`): when the student's records are what the mistaken function computes, the message names the mistake.
"""
import functools

import torch

from attention_course import data
from attention_grader.judging import (G, Check, Expect, Program, call_check, compare, expect_value_error,
                                      raised_message)
from attention_grader.judging import NamedMistake
from attention_grader.judges.common import ATTENTION_SOFTMAX, SOFTMAX_OPS, by_running, first_raised, library_ops, \
    with_hint
from attention_course.memory import OpTrace

SCORES = data.journey_inputs() @ data.journey_inputs().T
NO_SOFTMAX = ("the exercise asks you to write the loop: a running maximum and sum over blocks, computed with your "
              "own operations; the grader watches what your function runs, and a library softmax or log-sum-exp "
              "(torch.softmax, F.softmax, logsumexp, whatever name reached it) does the loop's work for it")
NO_SDPA = ("write the loop over blocks of keys yourself, with a running maximum, sum and output per query (no library "
           "attention: SDPA and its kernels are what it is compared with; the grader watches the operations your "
           "function runs, whatever name reached them)")
OUTSIDE = ("compute the result with torch operations on the inputs: values computed elsewhere (numpy, Python) and "
           "brought into torch (torch.from_numpy, torch.tensor, torch.as_tensor) are computed where the grader does "
           "not watch, whatever torch operations run beside them")
NO_RESCALE = ("the running sum is not rescaled: when the maximum grows from m to m_new, the sum so far was computed "
              "with the old maximum: multiply it by exp(m - m_new) before adding the block's terms")
INVERTED = ("the result is nan everywhere, as when the sum is rescaled by exp(m_new - m) instead of exp(m - m_new): the "
            "factor must shrink the old terms (m_new >= m), and with m = -inf at the start exp(m_new - m) is inf, "
            "and inf * 0 is nan")
NO_KEEPDIM = ("the running maximum and sum lost the row dimension (max, amax or sum without keepdim=True): a (rows,) "
              "tensor does not line up with a (rows, block) block; keep them (..., 1) with keepdim=True")
ALONG_ROWS = ("the blocks run along the first dimension (x[start:start + block_size] takes rows): the softmax is over "
              "the last dimension, in blocks of columns x[..., start:start + block_size], with one running maximum and "
              "sum per row")
NO_SCALE = "the scores are not scaled: multiply queries @ keys_block^T by 1 / sqrt(d), d = queries.shape[-1]"
SCALE_D = "the scores are divided by d: divide them by sqrt(d), d = queries.shape[-1]"
DOT_T = ("keys_block.T reverses every dimension of a batched tensor (and is deprecated beyond 2-D): use "
         "keys_block.transpose(-2, -1) to swap the last two only")
NO_MAX = "exp of a large score overflows to inf: subtract the running maximum before exponentiating"
MAX_FROM_ZERO = ("start the running maximum at -inf, not 0: when every score of a row is below about -88, "
                 "exp(score - 0) underflows to 0 and the row becomes 0 / 0")
LAST_BLOCK = ("a block boundary is lost: the last block may be shorter than block_size and block_size may be larger "
              "than the row; range(0, T, block_size) with x[..., start:start + block_size] covers every column once")
RESCALE_OUTPUT = ("the running output was computed with the old maximum too, and is not rescaled: multiply it by "
                  "exp(m - m_new), like the sum, before adding p @ values_block")
POSITIONS = ("in the block that starts at `start`, key j is token start + j: compare start + j with the query's "
             "position, not j")
ITSELF = "a query may see its own key: mask the keys whose position is greater than the query's, not equal"
CAUSAL_IGNORED = ("causal=True is ignored: no key is masked, so each query also sees the keys after it; mask the keys "
                  "whose position (start + j) is greater than the query's")
GENERIC_SOFTMAX = "m_new = max(m, block max); l = l * exp(m - m_new) + sum(exp(block - m_new)); at the end exp(x - m) / l"
GENERIC_TILED = ("per block: s = queries @ keys_block^T / sqrt(d), m_new = max(m, s max), p = exp(s - m_new), "
                 "l = l * exp(m - m_new) + p sum, o = o * exp(m - m_new) + p @ values_block; at the end o / l")


# ---------------------------------------------------------------------------------------------------------------
# the mistakes, written out
# ---------------------------------------------------------------------------------------------------------------

def blocks(length, block_size, last_block=True):
    end = length if last_block else length - block_size + 1
    return range(0, end, block_size)


def mistaken_softmax(x, block_size, rescale=True, subtract_max=True, last_block=True, max_from_zero=False,
                     inverted=False, keepdim=True):
    kept = (1,) if keepdim else ()
    m = x.new_full((*x.shape[:-1], *kept), -torch.inf if subtract_max and not max_from_zero else 0.0)
    l = x.new_zeros((*x.shape[:-1], *kept))
    for j in blocks(x.shape[-1], block_size, last_block):
        x_j = x[..., j:j + block_size]
        m_j = torch.maximum(m, x_j.amax(-1, keepdim=keepdim)) if subtract_max else m
        factor = (m_j - m).exp() if inverted else (m - m_j).exp()
        l = (l * factor if rescale else l) + (x_j - m_j).exp().sum(-1, keepdim=keepdim)
        m = m_j
    return (x - m).exp() / l


def softmax_along_rows(x, block_size):
    """What blocks over the first dimension compute: a softmax over dimension 0."""
    return torch.softmax(x, dim=0)


def mistaken_attention(queries, keys, values, block_size, causal=False, rescale_sum=True, rescale_output=True,
                       subtract_max=True, last_block=True, global_positions=True, see_itself=True,
                       max_from_zero=False, scale="sqrt", dot_t=False, ignore_causal=False):
    t, d = keys.shape[-2], queries.shape[-1]
    m = queries.new_full((*queries.shape[:-1], 1), -torch.inf if subtract_max and not max_from_zero else 0.0)
    l = queries.new_zeros((*queries.shape[:-1], 1))
    o = queries.new_zeros((*queries.shape[:-1], values.shape[-1]))
    rows = torch.arange(queries.shape[-2]).unsqueeze(-1)
    for j in blocks(t, block_size, last_block):
        k_j, v_j = keys[..., j:j + block_size, :], values[..., j:j + block_size, :]
        s_j = torch.matmul(queries, k_j.T if dot_t else k_j.mT) / {"sqrt": d ** 0.5, "d": d, "none": 1}[scale]
        if causal and not ignore_causal:
            cols = torch.arange(k_j.shape[-2]) + (j if global_positions else 0)
            s_j = s_j.masked_fill(cols > rows if see_itself else cols >= rows, -torch.inf)
        m_j = torch.max(m, s_j.max(-1, keepdim=True).values) if subtract_max else m
        alpha, p_j = (m - m_j).exp(), (s_j - m_j).exp()
        l = (l * alpha if rescale_sum else l) + p_j.sum(-1, keepdim=True)
        o = (o * alpha if rescale_output else o) + torch.matmul(p_j, v_j)
        m = m_j
    return o / l


def mistake(hint, name, function, **wrong):
    return hint, {name: functools.partial(function, **wrong)}


SOFTMAX_MISTAKES = (mistake(NO_RESCALE, "online_softmax", mistaken_softmax, rescale=False),
                    mistake(MAX_FROM_ZERO, "online_softmax", mistaken_softmax, max_from_zero=True),
                    mistake(NO_MAX, "online_softmax", mistaken_softmax, subtract_max=False),
                    mistake(LAST_BLOCK, "online_softmax", mistaken_softmax, last_block=False),
                    mistake(INVERTED, "online_softmax", mistaken_softmax, inverted=True),
                    mistake(NO_KEEPDIM, "online_softmax", mistaken_softmax, keepdim=False),
                    (ALONG_ROWS, {"online_softmax": softmax_along_rows}))
ATTENTION_MISTAKES = (mistake(RESCALE_OUTPUT, "tiled_attention", mistaken_attention, rescale_output=False),
                      mistake(NO_RESCALE, "tiled_attention", mistaken_attention, rescale_sum=False),
                      mistake(NO_RESCALE, "tiled_attention", mistaken_attention, rescale_sum=False,
                              rescale_output=False),
                      mistake(MAX_FROM_ZERO, "tiled_attention", mistaken_attention, max_from_zero=True),
                      mistake(NO_MAX, "tiled_attention", mistaken_attention, subtract_max=False),
                      mistake(LAST_BLOCK, "tiled_attention", mistaken_attention, last_block=False),
                      mistake(POSITIONS, "tiled_attention", mistaken_attention, global_positions=False),
                      mistake(ITSELF, "tiled_attention", mistaken_attention, see_itself=False),
                      mistake(CAUSAL_IGNORED, "tiled_attention", mistaken_attention, ignore_causal=True),
                      mistake(NO_SCALE, "tiled_attention", mistaken_attention, scale="none"),
                      mistake(SCALE_D, "tiled_attention", mistaken_attention, scale="d"),
                      mistake(DOT_T, "tiled_attention", mistaken_attention, dot_t=True))


# ---------------------------------------------------------------------------------------------------------------
# Part 1: the online softmax
# ---------------------------------------------------------------------------------------------------------------

LIBRARY_SOFTMAX = SOFTMAX_OPS | {"logsumexp", "logcumsumexp"}
TWO_PASS = ("the first pass over the blocks computes only the maximum: that is a two-pass softmax (maximum first, "
            "sums second). Keep a running sum with the running maximum, in the same pass, and rescale the sum by "
            "exp(m - m_new) when the maximum grows")
IN_BLOCKS = ("compute with a block of block_size columns at once (its maximum, its exponentials), not one column or "
             "a smaller piece at a time: block_size is what the caller chooses")
WHOLE_ROW = ("loop over blocks of block_size columns and compute with each block (its maximum, its exponentials), "
             "updating a running maximum and sum; only the final exp(x - m) / l may read the whole row")


def dispatched(what, record, forbidden, hint, kind=None):
    """A message when the operations the call ran (recorded in the kernel) include a library's softmax/attention."""
    used = library_ops(record["trace"]["ops"], forbidden)
    if used:
        kind = kind or ("softmax" if "softmax" in used[0] else "kernel")
        return with_hint(f"{what} ran aten.{used[0]}, a library's {kind}", hint)
    return None


def from_outside(what, record):
    """A message when the result of a traced call holds values brought into torch as data during the call (numpy's
    or Python's), rather than computed by the torch operations the trace saw; None when it holds none."""
    trace = record.get("trace") if isinstance(record, dict) else None
    count = trace.get("outside") if isinstance(trace, dict) else None
    if not isinstance(count, int) or isinstance(count, bool):
        return f"{what}: its operations were not recorded"
    if count:
        return with_hint(f"{what}: {count:,} values of its result came into torch as data during the call (from numpy "
                         "or Python, through torch.from_numpy, torch.tensor or torch.as_tensor), not from torch "
                         "operations on its inputs", OUTSIDE)
    return None


def attention_problem(what, record):
    """What the trace shows of a library's attention kernel, or of values that came into torch as data; None."""
    return dispatched(what, record, LIBRARY_ATTENTION, NO_SDPA, "attention kernel") or from_outside(what, record)


def block_reads(got, width):
    """From a call traced in the kernel: (operations, {block: index of the first operation that reads that block
    alone}, [indices of operations that read across blocks]), blocks being `width` consecutive elements of the traced
    tensor; None when the trace is missing or malformed."""
    trace = got[0].get("trace") if isinstance(got[0], dict) else None
    if not (isinstance(trace, dict) and isinstance(trace.get("ops"), list) and isinstance(trace.get("reads"), list)):
        return None
    ops, first, wide = trace["ops"], {}, []
    for read in trace["reads"]:
        if not (isinstance(read, list) and len(read) == 3 and all(isinstance(n, int) for n in read)):
            return None
        index, start, stop = read
        if not 0 <= index < len(ops) or str(ops[index]) in OpTrace.COPIES or stop <= start:
            continue
        if start // width == (stop - 1) // width:
            first.setdefault(start // width, index)
        else:
            wide.append(index)
    return ops, first, wide


def one_pass_check(x, block_size):
    """online_softmax(x, block_size) on one row, traced in the kernel: it must read the row block by block, computing
    exponentials in the same pass as the running maximum, and read the whole row only at the end (a teaching check:
    a student who replaces the probe could forge the trace)."""
    length = x.shape[-1]
    what = f"online_softmax on a row of {length} scores, block_size={block_size}, watched operation by operation"
    p = Program()
    p.record(p.call(G("online_softmax"), p.tensor(x), block_size, trace=0), "the result", GENERIC_SOFTMAX,
             atol=1e-5)
    count = -(-length // block_size)

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        reads = block_reads(got, block_size)
        if reads is None:
            return f"{what}: its operations were not recorded"
        problem = dispatched(what, got[0], LIBRARY_SOFTMAX, NO_SOFTMAX) or from_outside(what, got[0])
        if problem:
            return problem
        ops, first, wide = reads
        missing = [k for k in range(count) if k not in first]
        last = first.get(count - 1)
        if missing or any(index < last for index in wide):
            return with_hint(f"{what}: it reads the whole row at once"
                             + (f", and no operation reads block {missing[0]} alone" if missing else
                                " before it has gone through the blocks"), WHOLE_ROW)
        if count > 1 and not any(str(op).startswith(("exp", "logaddexp")) for op in ops[first[0]:last]):
            return with_hint(f"{what}: it reads every block before computing any exponential", TWO_PASS)
        spans = {(start, stop) for _, start, stop in got[0]["trace"]["reads"]}
        partial = [k for k in range(length // block_size) if (k * block_size, (k + 1) * block_size) not in spans]
        if block_size > 1 and partial:
            return with_hint(f"{what}: no operation reads block {partial[0]} (columns {partial[0] * block_size} to "
                             f"{(partial[0] + 1) * block_size - 1}) as a whole", IN_BLOCKS)
        return with_hint(compare(got[1], want[1], f"{what}: the result", Expect("", atol=1e-5, rtol=1e-4)),
                         GENERIC_SOFTMAX)

    return Check(what, p, judge=judge)


def online_softmax(inputs):
    checks = []
    cases = [(f"online_softmax(attn_scores[1], block_size={b})", SCORES[1], b) for b in (1, 4, 5, 6, 7)]
    cases.append(("online_softmax(1000 * attn_scores, block_size=2)", 1000 * SCORES, 2))
    cases.append(("online_softmax on a row that grows with every block, block_size=3",
                  torch.arange(12, dtype=torch.float32) * 0.5, 3))
    cases.append(("online_softmax on random (3, 7) rows minus 1000, block_size=2", inputs.randn(3, 7) - 1000, 2))
    for shape, block_size, scale in [((9,), 1, 1.0), ((4, 9), 4, 3.0), ((2, 3, 13), 5, 10.0), ((3, 8), 8, 1.0),
                                     ((1, 17), 32, 1.0), ((2, 2, 2, 10), 3, 1000.0), ((5, 6), 2, 300.0)]:
        cases.append((f"online_softmax on a random {shape} input times {scale:g}, block_size={block_size}",
                      inputs.randn(*shape, scale=scale), block_size))
    for what, x, block_size in cases:
        check = call_check(what, "online_softmax", x, block_size, hint=GENERIC_SOFTMAX, atol=1e-5, rtol=1e-4)
        checks.append(by_running(check, SOFTMAX_MISTAKES))
    checks += [one_pass_check(torch.arange(12, dtype=torch.float32) * 0.5, 3),
               one_pass_check(inputs.randn(10, scale=3.0), 4)]
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 2: attention over blocks of keys
# ---------------------------------------------------------------------------------------------------------------

# PyTorch's attention kernels (by name, in library_ops) and the softmaxes SDPA runs on its math path. A library
# softmax is no attention kernel: over a tile of scores it is a legitimate step of the loop (each tile normalised on its
# own, the tiles merged through their log-sum-exp); over whole rows it needs all the scores at once, which the checks
# below refuse from the sizes of the tensors the call made and from the order it reads the keys in.
LIBRARY_ATTENTION = ATTENTION_SOFTMAX
WHOLE_ROWS = ("scores for every key at once make a softmax over whole rows, not the loop: compute the scores of one "
              "block of keys at a time, (..., T, block_size), and combine the blocks through a running maximum and sum "
              "(or through their log-sum-exp)")


def kernel_check(inputs, causal):
    """tiled_attention traced in the kernel: no library attention kernel among the operations it ran, no tensor as
    large as all the (T, T) scores (whole rows of scores, whatever computes their softmax), and a result computed by the
    operations traced."""
    leading, num_tokens, d, block_size = 2, 16, 4, 3  # a (T, block_size, d) broadcast product stays under (T, T)
    what = (f"tiled_attention on random ({leading}, {num_tokens}, {d}) inputs, block_size={block_size}"
            + (", causal=True" if causal else ""))
    p = Program()
    q, k, v = (p.tensor(inputs.randn(leading, num_tokens, d)) for _ in range(3))
    p.record(p.call(G("tiled_attention"), q, k, v, block_size, trace=0, measure=True,
                    **({"causal": True} if causal else {})), "the output", GENERIC_TILED)
    whole = leading * num_tokens * num_tokens

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        memory = got[0].get("memory") if isinstance(got[0], dict) else None
        largest = memory.get("largest_numel") if isinstance(memory, dict) else None
        if not isinstance(largest, int) or not isinstance(got[1], dict) or not isinstance(
                got[1].get("trace"), dict) or not isinstance(got[1]["trace"].get("ops"), list):
            return f"{what}: its operations were not recorded"
        problem = attention_problem(what, got[1])
        if problem:
            return problem
        if largest >= whole:
            return with_hint(f"{what} made a tensor of {largest:,} entries, as many as the scores of every query "
                             f"against every key ({leading}, {num_tokens}, {num_tokens}): whole rows of scores",
                             WHOLE_ROWS)
        return with_hint(compare(got[2], want[2], f"{what}: the output", Expect("", atol=1e-4, rtol=1e-4)),
                         GENERIC_TILED)

    return Check(what, p, judge=judge, mistakes=ATTENTION_MISTAKES)


KEYS_AT_ONCE = ("an operation reads all the keys at once (blocks of queries against every key, or whole rows of "
                "scores): FlashAttention's loop reads one block of keys at a time, keeps a running maximum, sum and "
                "output per query, and rescales them by exp(m - m_new) when the maximum grows")
TWO_PASS_TILED = ("the first pass over the key blocks computes only the maxima, and the exponentials come in a second "
                  "pass: that is a two-pass softmax. The online algorithm computes each block's exponentials as soon "
                  "as it reads the block, and multiplies the running sum and output by exp(m - m_new) when the "
                  "maximum grows")
EXPONENTIALS = ("exp", "logaddexp", "logsumexp", "sigmoid", "log_sigmoid", "softplus", "_softmax", "_log_softmax")


def key_blocks_check(inputs, causal):
    """tiled_attention traced in the kernel, watching the keys: each block of keys is read on its own, and the first
    exponentials come before the last block is read (the online algorithm; a teaching check: a student who replaces
    the probe could forge the trace)."""
    num_tokens, d, block_size = 12, 4, 3
    what = (f"tiled_attention on random ({num_tokens}, {d}) inputs, block_size={block_size}"
            + (", causal=True" if causal else "") + ", watched operation by operation")
    p = Program()
    q, k, v = (p.tensor(inputs.randn(num_tokens, d)) for _ in range(3))
    p.record(p.call(G("tiled_attention"), q, k, v, block_size, trace=1, **({"causal": True} if causal else {})),
             "the output", GENERIC_TILED)
    count = -(-num_tokens // block_size)

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        reads = block_reads(got, d * block_size)
        if reads is None:
            return f"{what}: its operations were not recorded"
        problem = from_outside(what, got[0])
        if problem:
            return problem
        ops, first, wide = reads
        missing = [block for block in range(count) if block not in first]
        if missing or (wide and min(wide) < first[count - 1]):
            return with_hint(f"{what}: it reads all the keys at once"
                             + (f", and no operation reads key block {missing[0]} alone" if missing else ""),
                             KEYS_AT_ONCE)
        between = ops[first[0]:first[count - 1]]
        if not any(str(op).startswith(EXPONENTIALS) for op in between):
            return with_hint(f"{what}: it reads every key block before computing any exponential", TWO_PASS_TILED)
        return with_hint(compare(got[1], want[1], f"{what}: the output", Expect("", atol=1e-4, rtol=1e-4)),
                         GENERIC_TILED)

    return Check(what, p, judge=judge, mistakes=ATTENTION_MISTAKES)


def attention_checks(inputs, causal):
    checks = []
    cases = [((), 6, 3, 2, 1.0), ((1, 2), 10, 4, 1, 1.0), ((2, 3), 11, 5, 4, 1.0), ((2,), 7, 8, 7, 1.0),
             ((1, 1), 9, 4, 16, 1.0), ((3, 2), 16, 6, 5, 50.0), ((2, 2), 13, 8, 3, 30.0), ((1,), 1, 4, 2, 1.0)]
    for leading, num_tokens, d, block_size, scale in cases:
        queries = inputs.randn(*leading, num_tokens, d, scale=scale)
        keys, values = (inputs.randn(*leading, num_tokens, d) for _ in range(2))
        scaled = f" (queries times {scale:g})" if scale > 1 else ""
        what = (f"tiled_attention on random {tuple(queries.shape)} inputs{scaled}, block_size={block_size}"
                + (", causal=True" if causal else ""))
        check = call_check(what, "tiled_attention", queries, keys, values, block_size,
                           hint=GENERIC_TILED, atol=1e-4, rtol=1e-4, **({"causal": True} if causal else {}))
        checks.append(by_running(check, ATTENTION_MISTAKES))
    # every score near -2000: a running maximum that starts at 0 underflows (in float64 too, so it is named)
    queries, keys = 40 + inputs.randn(2, 8, 4, scale=0.5), -25 + inputs.randn(2, 8, 4, scale=0.5)
    what = ("tiled_attention on (2, 8, 4) inputs whose scores are all near -2000, block_size=3"
            + (", causal=True" if causal else ""))
    check = call_check(what, "tiled_attention", queries, keys, inputs.randn(2, 8, 4), 3, hint=GENERIC_TILED,
                       atol=2e-3, rtol=1e-3, **({"causal": True} if causal else {}))
    checks.append(by_running(check, ATTENTION_MISTAKES))
    return checks + [kernel_check(inputs, causal), key_blocks_check(inputs, causal)]


def tiled_attention(inputs):
    return attention_checks(inputs, causal=False)


def tiled_attention_causal(inputs):
    return attention_checks(inputs, causal=True)


def peak_limit(num_tokens, d, block_size):
    """The bytes that may be alive at once: six (T, block_size) tiles and eight (T, d) tensors (copies of the inputs,
    the running output), counted in float64 so that a loop computing in float64 fits too."""
    return 8 * (6 * num_tokens * block_size + 8 * num_tokens * d)


HELD_AT_ONCE = ("the tiles of the blocks already done stay alive (kept in a list, or referenced by a variable): a block's "
                "scores and exponentials are needed only until the running maximum, sum and output are updated; let "
                "them go, and keep only the running state of one row per query")
WHOLE_MATRIX = ("compute the scores of one block of keys at a time, (T, block_size), and build each block's causal mask "
                "from the positions of its keys, not from a (T, T) mask")


def memory_check(inputs, num_tokens, d, block_size, causal, traced=False):
    """The peak of the bytes held by live tensors during one call (attention_course/memory.py): never a (T, T) tensor,
    at most `peak_limit` bytes at once; with `traced`, no library kernel among the operations it ran."""
    what = f"tiled_attention on random ({num_tokens}, {d}) inputs, block_size={block_size}, causal={causal}"
    p = Program()
    queries, keys, values = (p.tensor(inputs.randn(num_tokens, d)) for _ in range(3))
    result = p.call(G("tiled_attention"), queries, keys, values, block_size, causal=causal, measure=True,
                    trace=0 if traced else None)
    p.record(result, "the output")
    largest_limit, limit = num_tokens * num_tokens // 2, peak_limit(num_tokens, d, block_size)

    def judge(got, want):
        found = first_raised(got)
        if found:
            return raised_message(what, found[1])
        memory = got[0].get("memory") if isinstance(got[0], dict) else None
        largest = memory.get("largest_numel") if isinstance(memory, dict) else None
        peak = memory.get("peak_bytes") if isinstance(memory, dict) else None
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (largest, peak)):
            return f"{what}: its memory was not recorded"
        if traced:
            trace = got[1].get("trace") if len(got) > 2 and isinstance(got[1], dict) else None
            if not isinstance(trace, dict) or not isinstance(trace.get("ops"), list):
                return f"{what}: its operations were not recorded"
            problem = attention_problem(what, got[1])
            if problem:
                return problem
        if largest >= largest_limit:
            return with_hint(f"{what} made a tensor of {largest:,} entries, as large as the (T, T) = ({num_tokens}, "
                             f"{num_tokens}) weights", WHOLE_MATRIX)
        if peak > limit:
            return with_hint(f"{what} held {peak:,} bytes at once at its peak, more than {limit:,} (six (T, "
                             f"block_size) tiles and eight (T, d) tensors in float64); all the (T, T) float32 "
                             f"weights take {4 * num_tokens * num_tokens:,}", HELD_AT_ONCE)
        if causal:  # the values are judged by the causal cell
            return None
        return with_hint(compare(got[-1], want[-1], f"{what}: the output", Expect("", atol=1e-4, rtol=1e-4)),
                         GENERIC_TILED)

    return Check(what, p, judge=judge, mistakes=ATTENTION_MISTAKES)


def tiled_attention_memory(inputs):
    # the first case watches the operations too; the last has 24 blocks, where a list of every block's tiles holds
    # several times what the loop needs (the visible test has it causal)
    return [memory_check(inputs, 250, 16, 32, False, traced=True)] + [
        memory_check(inputs, num_tokens, d, block_size, causal)
        for num_tokens, d, block_size, causal in [(256, 16, 32, True), (320, 8, 48, False), (200, 4, 64, True),
                                                  (384, 8, 16, False)]]


def tiled_attention_arguments(inputs):
    checks = []
    for block_size in (0, -2):
        p = Program()
        x = p.tensor(inputs.randn(4, 3))
        p.call(G("tiled_attention"), x, x, x, block_size)
        checks.append(expect_value_error(f"tiled_attention on (4, 3) inputs with block_size={block_size}", p,
                                         "block_size"))
    return checks


# ---------------------------------------------------------------------------------------------------------------
# Part 3: merge_attention (transfer: the lesson adds one block at a time to a running maximum and sum; here two
# finished partial results, each normalised by its own denominator and described by its log-sum-exp, are merged)
# ---------------------------------------------------------------------------------------------------------------

MERGE_HINT = ("each worker's output is normalised by its own denominator exp(lse): weigh it by its share of the two "
              "denominators, exp(lse_a - top) and exp(lse_b - top) with top the larger lse; the merged lse is "
              "top + log of their sum")
NAIVE_EXP = ("exp(lse) overflows to inf once the scores are in the hundreds: exponentiate only the difference of each "
             "lse to the larger one, as Part 1 does with the running maximum")
EQUAL_AVERAGE = ("the two outputs were averaged with equal weights: each must count by its share of the two "
                 "denominators, exp(lse_a) and exp(lse_b), computed stably")
BOTH_EMPTY = ("a query that sees no key at all has lse_a = lse_b = -inf, and -inf - (-inf) is nan: give it an output "
              "row of zeros and lse = -inf")
LSE_MAX = "the merged lse is log(exp(lse_a) + exp(lse_b)), not the larger of the two"
SWAPPED_WEIGHTS = ("the weights are swapped: out_a counts by its own share exp(lse_a - lse) and out_b by exp(lse_b - "
                   "lse), lse being the merged one")
NO_LAST_AXIS = ("the weights have shape (..., T) and the outputs (..., T, d): give the weights a last axis "
                "(w[..., None] or unsqueeze(-1)) so that each query's weight scales its whole output row")
IN_PLACE = ("merge_attention changed its inputs (an in-place operation such as mul_, add_, *= or /= on out_a, "
            "out_b, lse_a or lse_b): compute new tensors and leave the inputs as they were")


def worker(queries, keys, values, first, causal):
    """A worker's partial result over its keys (tokens first, first + 1, ...), in float64: (out, lse)."""
    scores = queries @ keys.transpose(-2, -1) * queries.shape[-1] ** -0.5
    if causal:
        positions = torch.arange(first, first + keys.shape[-2])
        scores = scores.masked_fill(positions > torch.arange(queries.shape[-2])[:, None], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.nan_to_num(torch.exp(scores - lse[..., None])) @ values, lse


def _merge(out_a, lse_a, out_b, lse_b, naive=False, equal=False, guard=True, lse_max=False, swapped=False,
           nan_to_num=False, last_axis=True):
    top = torch.maximum(lse_a, lse_b)
    if guard:
        top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    if naive:
        top = torch.zeros_like(top)
    weight_a, weight_b = torch.exp(lse_a - top), torch.exp(lse_b - top)
    total = weight_a + weight_b
    if swapped:
        weight_a, weight_b = weight_b, weight_a
    if not last_axis:
        return weight_a * out_a + weight_b * out_b, top + torch.log(total)
    if equal:
        merged = (out_a + out_b) / 2
    else:
        merged = (weight_a[..., None] * out_a + weight_b[..., None] * out_b) / (
            total.clamp_min(torch.finfo(total.dtype).tiny) if guard else total)[..., None]
    if nan_to_num:
        merged = torch.nan_to_num(merged)
    return merged, torch.maximum(lse_a, lse_b) if lse_max else top + torch.log(total)


MERGE_MISTAKES = tuple((hint, {"merge_attention": functools.partial(_merge, **wrong)}) for hint, wrong in (
    (NAIVE_EXP, {"naive": True}), (NAIVE_EXP, {"naive": True, "nan_to_num": True}), (EQUAL_AVERAGE, {"equal": True}),
    (BOTH_EMPTY, {"guard": False}), (LSE_MAX, {"lse_max": True}), (SWAPPED_WEIGHTS, {"swapped": True}),
    (NO_LAST_AXIS, {"last_axis": False})))


def merge_by_running(check):
    """`check` naming the usual merge mistakes by running them, and saying so when the inputs were changed."""
    check = by_running(check, MERGE_MISTAKES)
    judge = check.judge

    def judged(got, want):
        problem = judge(got, want)
        if problem and not isinstance(problem, NamedMistake) and "its input after the call" in problem.split("\n")[0]:
            return NamedMistake(with_hint(problem.split("\n  likely mistake: ")[0], IN_PLACE))
        return problem

    check.judge = judged
    return check


def merge_check(inputs, leading, num_tokens, d, split, causal, scale=1.0, swap=False):
    queries = inputs.randn(*leading, num_tokens, d, scale=scale).double()
    keys, values = inputs.randn(*leading, num_tokens, d).double(), inputs.randn(*leading, num_tokens, d).double()
    a = worker(queries, keys[..., :split, :], values[..., :split, :], 0, causal)
    b = worker(queries, keys[..., split:, :], values[..., split:, :], split, causal)
    if swap:
        a, b = b, a
    what = (f"merge_attention on two workers' results over keys {'0-' + str(split - 1)} and {split}-{num_tokens - 1} "
            f"of random {tuple(queries.shape)} queries{', causal' if causal else ''}"
            f"{', scores in the thousands' if scale > 1 else ''}{', workers swapped' if swap else ''}")
    check = call_check(what, "merge_attention", a[0], a[1], b[0], b[1], hint=MERGE_HINT, atol=1e-6, rtol=1e-6)
    return merge_by_running(check)


def empty_check(inputs):
    """Rows that see no key of either worker (and rows that see one worker's keys only)."""
    num_tokens, d = 5, 3
    out_a, out_b = inputs.randn(2, num_tokens, d).double(), inputs.randn(2, num_tokens, d).double()
    lse_a, lse_b = inputs.randn(2, num_tokens).double(), inputs.randn(2, num_tokens).double()
    lse_a[0, :2] = lse_b[0, :2] = float("-inf")
    lse_b[1, 2:] = float("-inf")
    out_a[0, :2] = out_b[0, :2] = 0.0
    out_b[1, 2:] = 0.0
    check = call_check("merge_attention on rows where a worker, or both, saw no key (lse = -inf, output row zero)",
                       "merge_attention", out_a, lse_a, out_b, lse_b, hint=BOTH_EMPTY, atol=1e-6, rtol=1e-6)
    return merge_by_running(check)


def merge_attention(inputs):
    checks = [merge_check(inputs, *case) for case in [
        ((), 6, 4, 3, False), ((2,), 7, 5, 2, False), ((1, 2), 8, 4, 5, True), ((3,), 5, 6, 1, True),
        ((2,), 9, 3, 4, True, 1.0, True), ((), 6, 8, 3, False, 3000.0), ((2,), 7, 4, 4, True, 2000.0, True)]]
    num_tokens = inputs.randint(3, 10)
    checks.append(merge_check(inputs, (inputs.randint(1, 3),), num_tokens, inputs.randint(2, 7),
                              inputs.randint(1, num_tokens), bool(inputs.randint(0, 2))))
    checks.append(empty_check(inputs))
    for name in ("lse_a", "lse_b"):
        p = Program()
        out, lse = p.tensor(inputs.randn(2, 4, 3).double()), p.tensor(inputs.randn(2, 4).double())
        short = p.tensor(inputs.randn(2, 3).double())
        args = (out, short, out, lse) if name == "lse_a" else (out, lse, out, short)
        p.call(G("merge_attention"), *args)
        checks.append(expect_value_error(f"merge_attention with {name} of shape (2, 3) for outputs (2, 4, 3)", p,
                                         name))
    return checks


CELLS = {
    "test_online_softmax": online_softmax,
    "test_tiled_attention": tiled_attention,
    "test_tiled_attention_causal": tiled_attention_causal,
    "test_tiled_attention_memory": tiled_attention_memory,
    "test_tiled_attention_arguments": tiled_attention_arguments,
    "test_merge_attention": merge_attention,
}

# Part 3 applies the online softmax's rescaling to merging two finished partial results (split keys, as in
# FlashDecoding and ring attention), described by their log-sum-exp: the lesson only adds one block at a time.
TRANSFER = {"test_merge_attention"}
