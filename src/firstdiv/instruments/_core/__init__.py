"""What two or more instruments share: reading a batch and calling user code (``batch``), checks and their
composition (``checks``), leaving no trace (``state`` and its ``state_values``, ``state_diff``, ``stateful``,
``closure``, ``copying``, ``python_graph``), user hooks (``user_hooks``, ``hook_tally``), the op recorder
(``trace``), memory readings (``memory``), output and per-layer comparison (``outputs``, ``layers``) and task
inference (``task``). No instrument imports another instrument's private module; what they share lives here."""
