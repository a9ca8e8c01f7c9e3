"""Peak memory of the tensors a piece of code creates, on any device, measured from inside PyTorch.

    with PeakMemory() as memory:
        context_vecs = attention(queries, keys, values)
    memory.peak_bytes      # the most bytes held at once by tensors created inside the block
    memory.largest_numel   # the number of elements of the largest tensor created inside the block

Every operation PyTorch runs inside the block passes through `__torch_dispatch__`, which notes each new storage
and forgets it when its last tensor is freed. Views of a tensor created before the block (a transpose, a slice)
cost nothing, as they cost no memory.
"""
import _thread
import os
import sys
import threading
import weakref

import torch
# An operation run under a dispatch mode imports torch._dynamo, which settles a cache folder in the temporary directory:
# imported here, with the course package, not first in a graded test cell (whose /tmp is read-only).
import torch._dynamo  # noqa: F401
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# A dispatch mode sees the operations of its own thread only: while one watches, a thread or a process started to
# compute out of its sight is refused (processes through an audit hook; threads where Python starts them). In the
# grader's sandbox every notebook has a PID namespace of its own, in which nothing else runs while a test cell does:
# the kernel's last PID there moves only when this process starts a thread or a process, however it was started (a
# reference to _thread.start_new_thread kept from before the watch too).
_STARTS = {"os.fork", "os.forkpty", "os.posix_spawn", "os.posix_spawnp", "os.spawn", "os.exec", "os.system",
           "subprocess.Popen"}
_OUT_OF_SIGHT = ("while its operations are watched, the call started {}: compute everything in the calling thread, "
                 "where the grader sees what runs")
_watches = []  # the watches open now, innermost last
_start_new_thread = _thread.start_new_thread
_LAST_PID = "/proc/sys/kernel/ns_last_pid"
_OWN_PID_NAMESPACE = os.environ.get("COURSE_SANDBOXED") == "1"  # read when the grader imports the package


def _last_pid():
    """The last PID the kernel gave out in this process's PID namespace (None outside the grader's sandbox)."""
    if not _OWN_PID_NAMESPACE:
        return None
    try:
        with open(_LAST_PID) as file:
            return int(file.read())
    except (OSError, ValueError):
        return None


refusals = [0]  # how many starts were refused: a probe that may catch a call's error never catches these


def _refuse_processes(event, args):
    if _watches and event in _STARTS:
        refusals[0] += 1
        raise RuntimeError(_OUT_OF_SIGHT.format(f"a process ({event})"))


def _refuse_thread(*args, **kwargs):
    refusals[0] += 1
    raise RuntimeError(_OUT_OF_SIGHT.format("a thread"))


sys.addaudithook(_refuse_processes)


class _InThisThread(TorchDispatchMode):
    def __enter__(self):
        if not _watches:
            _thread.start_new_thread = threading._start_new_thread = _refuse_thread
        self.last_pid = _last_pid()
        _watches.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _watches.remove(self)
        if not _watches:
            _thread.start_new_thread = threading._start_new_thread = _start_new_thread
        super().__exit__(*exc)
        if self.last_pid is not None and _last_pid() != self.last_pid and exc[0] is None:
            refusals[0] += 1
            raise RuntimeError(_OUT_OF_SIGHT.format("a thread or a process"))
        return False


class PeakMemory(_InThisThread):
    def __init__(self):
        super().__init__()
        self.live = {}  # storage address -> [bytes, number of live tensors using it]
        self.current_bytes = 0
        self.peak_bytes = 0
        self.largest_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(result)[0]:
            if isinstance(tensor, torch.Tensor):
                self._note(tensor, inputs)
        return result

    def _note(self, tensor, inputs):
        storage = tensor.untyped_storage()
        address, size = storage.data_ptr(), storage.nbytes()
        if address in self.live:
            self.live[address][1] += 1
        elif address in inputs or size == 0:
            return  # a view of a tensor made before the block, or nothing at all
        else:
            self.live[address] = [size, 1]
            self.current_bytes += size
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)
            self.largest_numel = max(self.largest_numel, tensor.numel())
        weakref.finalize(tensor, self._release, address)

    def _release(self, address):
        entry = self.live.get(address)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current_bytes -= entry[0]
            del self.live[address]


class OpTrace(_InThisThread):
    """The operations a piece of code dispatches, in order, and the elements of one watched tensor each one reads.

        with OpTrace(x) as trace:
            weights = online_softmax(x, 3)
        trace.ops    # ["slice", "full_like", "amax", ...]: the aten operations, in the order they ran
        trace.reads  # [(index in ops, first element, last element + 1), ...]: the elements of x each one read
        trace.unseeded  # [index in ops, ...]: the random draws made without a torch.Generator

    A view (slice, split, unfold, ...) reads nothing: the operations on it read x's elements. A copy of all of x
    (x.to(torch.float64), x.clone(), F.pad(x, ...)) is watched as x from then on, element for element.

        trace.outside(result)  # how many elements of result hold values that came into torch as data during the
                               # call (numpy, Python lists: what `lift_fresh` brings in), not computed by its operations
    """
    COPIES = {"_to_copy", "clone", "constant_pad_nd", "lift_fresh_copy", "alias", "detach"}
    METADATA = {"new_full", "new_zeros", "new_empty", "new_ones", "empty_like", "zeros_like", "ones_like", "full_like",
                "rand_like", "randn_like", "sym_size", "sym_stride", "sym_numel"}

    # The random draws: trace.unseeded lists the index in ops of each one made without a torch.Generator (PyTorch's
    # global generator, as nn.Dropout's draws are).
    RANDOM = {"rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
              "bernoulli_", "multinomial", "uniform_", "normal", "normal_", "exponential_", "geometric_", "cauchy_",
              "log_normal_", "random_", "native_dropout", "poisson"}

    def __init__(self, watched, limit=4000):
        super().__init__()
        self.watched = {watched.untyped_storage().data_ptr(): watched.untyped_storage().nbytes()}
        self.ops, self.reads, self.unseeded, self.limit = [], [], [], limit
        self.fresh, self.tainted = set(), set()  # storages brought in as data; storages holding values from them

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        self._follow(name, args, kwargs, result)
        if len(self.ops) >= self.limit:  # past the limit, each other operation once: a refused one is still seen
            if name not in self.ops:
                self.ops.append(name)
            return result
        self.ops.append(name)
        if name in self.RANDOM and (kwargs or {}).get("generator") is None:
            self.unseeded.append(len(self.ops) - 1)
        read = [t for t in tree_flatten((args, kwargs))[0]
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in self.watched]
        if not read or name in self.METADATA:
            return result
        made = [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)]
        if made and all(t.untyped_storage().data_ptr() in self.watched for t in made):
            return result  # a view
        for tensor in read:
            first = tensor.storage_offset()
            last = first + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride())) + 1 \
                if tensor.numel() else first
            self.reads.append((len(self.ops) - 1, first, last))
        if name in self.COPIES:
            for tensor in made:
                self.watched[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return result

    def _follow(self, name, args, kwargs, result):
        """Follows the values brought into torch as data (more than one number; integer and boolean data, such as
        positions or masks, are not followed) through the operations computed from them, in place or not."""
        given = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if name == "lift_fresh":
            self.fresh.update(t.untyped_storage().data_ptr() for t in given if t.untyped_storage().nbytes() > 8)
        tainted = any(t.untyped_storage().data_ptr() in self.tainted or (
            t.untyped_storage().data_ptr() in self.fresh and (t.is_floating_point() or t.is_complex()))
            for t in given)
        inputs = {t.untyped_storage().data_ptr() for t in given}
        for t in tree_flatten(result)[0]:
            if isinstance(t, torch.Tensor):
                address = t.untyped_storage().data_ptr()
                (self.tainted.add if tainted else self.tainted.discard)(address)
                if address not in inputs:  # new memory, perhaps where a freed one was
                    self.fresh.discard(address)

    def outside(self, result):
        """The number of elements of the tensors in `result` whose values came in as data during the trace."""
        return sum(t.numel() for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor) and (
            t.untyped_storage().data_ptr() in self.tainted or (
                t.untyped_storage().data_ptr() in self.fresh and (t.is_floating_point() or t.is_complex()))))
