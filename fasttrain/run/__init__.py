"""The run: the loop and its parts (``runner``, ``members``, ``parts``), the run directory
(``rundir``), checkpoints (``checkpoint``, in ``statefile``'s format), metrics and
dashboards, a population's folder (``population``) and the signals at start-up (``startup``)."""
