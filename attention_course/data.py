"""The running examples of the course, returned as fresh tensors so that no notebook can alter them for another."""
import torch

TOKENS = ["Your", "journey", "starts", "with", "one", "step"]

KID_TOKENS = ["the", "kid", "smiles"]


def journey_inputs():
    """The six tokens of "Your journey starts with one step" as 3-dimensional embeddings, shape (6, 3)."""
    return torch.tensor([
        [0.43, 0.15, 0.89],  # Your
        [0.55, 0.87, 0.66],  # journey
        [0.57, 0.85, 0.64],  # starts
        [0.22, 0.58, 0.33],  # with
        [0.77, 0.25, 0.10],  # one
        [0.05, 0.80, 0.55],  # step
    ])


def journey_batch():
    """Two copies of the journey sentence, shape (2, 6, 3): the smallest batch that shows batching."""
    inputs = journey_inputs()
    return torch.stack((inputs, inputs))


def kid_smiles_inputs():
    """"the kid smiles" as 6-dimensional embeddings in a batch of one, shape (1, 3, 6)."""
    return torch.tensor([[
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],  # the
        [6.0, 5.0, 4.0, 3.0, 2.0, 1.0],  # kid
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],  # smiles
    ]])


def journey_in_pairs():
    """The journey numbers regrouped into three 6-dimensional tokens, shape (3, 6): a small input for multi-head attention."""
    return torch.tensor([
        [0.43, 0.15, 0.89, 0.55, 0.87, 0.66],
        [0.57, 0.85, 0.64, 0.22, 0.58, 0.33],
        [0.77, 0.25, 0.10, 0.05, 0.80, 0.55],
    ])
