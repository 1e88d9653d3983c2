"""The networks of ``fasttrain/models.py``."""

import torch


def test_uint8_encoder_is_log1p_of_every_byte_and_leaves_its_input_alone():
    from fasttrain.models import ObsEncoder

    grid = torch.arange(256, dtype=torch.uint8).view(4, 8, 8)
    encoded = ObsEncoder(uint8_input=True)(grid)
    assert encoded.dtype == torch.float32
    torch.testing.assert_close(encoded, torch.log1p(grid.float()))
    assert torch.equal(grid, torch.arange(256, dtype=torch.uint8).view(4, 8, 8))
    floats = grid.float()  # an already float input (as play may pass) is not written to
    torch.testing.assert_close(ObsEncoder(uint8_input=True)(floats), torch.log1p(grid.float()))
    assert torch.equal(floats, grid.float())
    # under autograd too (the update's forward)
    weight = torch.ones(256, requires_grad=True)
    (ObsEncoder(uint8_input=True)(grid).view(-1) * weight).sum().backward()
    torch.testing.assert_close(weight.grad, torch.log1p(torch.arange(256.0)))
