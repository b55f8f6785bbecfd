"""memory_phases' advice table: per phase, what usually fills memory there, what reduces it, and one measurement
to take before changing a setting (appendix section 12)."""

from __future__ import annotations

#: phase -> (what usually fills memory there, what reduces it, one measurement to take before changing a setting)
ADVICE: dict[str, tuple[str, str, str]] = {
    "loading": (
        ("weights and initialization copies (a model built in float32 then cast, a state_dict loaded next to "
         "freshly initialized weights)"),
        ("build on the meta device or in the target dtype and load with torch.load(mmap=True) + "
         "load_state_dict(assign=True); load shards one at a time; choose a smaller model"),
        "parameter + buffer bytes of the model vs memory at the end of loading"),
    "forward": (
        "activations, logits or attention buffers",
        ("lower the micro-batch size or sequence length, enable an efficient attention path "
         "(scaled_dot_product_attention), use activation checkpointing, or select a smaller model"),
        ("memory at forward start and end for this micro-batch and for half of it (activation bytes scale with "
         "batch x sequence)")),
    "backward": (
        "saved activations plus the gradients being produced",
        ("activation checkpointing, a smaller micro-batch with gradient accumulation for the same effective batch, "
         "fewer trainable parameters (adapters / frozen layers)"),
        "memory at backward start (saved activations) vs parameter-gradient bytes"),
    "first_optimizer_step": (
        "optimizer state allocated on the first step (Adam/AdamW: two tensors per parameter)",
        ("a lighter optimizer policy (SGD, a factored or 8-bit optimizer), train an adapter or a subset of "
         "parameters, or offload optimizer state explicitly"),
        "optimizer state bytes per parameter byte (Adam: 2x in float32)"),
    "optimizer_step": (
        "a later optimizer step: its state already exists, so something else grew",
        ("check for retained graphs (memory rising across steps) and fragmentation (reserved >> allocated) before "
         "changing the optimizer"),
        "memory at the start of each step over several steps"),
    "evaluation": (
        "a different batch or a generation cache",
        ("check the evaluation batch size and sequence length, run under torch.no_grad() / torch.inference_mode(), "
         "bound the generation cache"),
        "evaluation batch shape vs training batch shape, and memory at evaluation start"),
    "export": (
        "temporary copies made during merge or export",
        "export from a copy on CPU, merge layer by layer or in place, save in shards",
        "memory before export vs the peak during export"),
}
GENERIC = ("whatever this phase allocates", "measure this phase's boundaries and reduce what it holds",
            "memory at this phase's start and end")
RETAINED = ("check for retained computation graphs: appending loss tensors (not loss.item()) or keeping logits of "
             "every batch keeps memory rising across steps; a steadily rising curve is a leak, not a model that is "
             "too large")


def advice(phase: str) -> dict[str, str]:
    cause, fix, measure = ADVICE.get(phase, GENERIC)
    return {"cause": cause, "fix": fix, "measure_first": measure, "also": RETAINED}
