"""The bundled scenarios: one k-NN message-passing module per memory pattern.

Each module declares EXPECTED_VERDICT, EXPECTED_CODES (the static rules it must trigger),
HOLDER (the subject the probe should name) and `make_step(device) -> step`. Importing this
package does not import torch.
"""

NAMES = (
    "clean",
    "output_on_ctx",
    "view_on_ctx",
    "input_on_ctx",
    "module_activations",
    "global_history",
    "loss_accumulation",
    "index_dtype",
    "fewer_grads",
)
