"""Peak memory of the tensors a piece of code creates, on any device, measured from inside PyTorch.

    with PeakMemory() as memory:
        context_vecs = attention(queries, keys, values)
    memory.peak_bytes      # the most bytes held at once by tensors created inside the block
    memory.largest_numel   # the number of elements of the largest tensor created inside the block

Every operation PyTorch runs inside the block passes through `__torch_dispatch__`, which notes each new storage
and forgets it when its last tensor is freed. Views of a tensor created before the block (a transpose, a slice)
cost nothing, as they cost no memory.
"""
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakMemory(TorchDispatchMode):
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
