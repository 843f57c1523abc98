"""Measured training runs: read them from what users have, and decide how pipesim simulates them.

* :mod:`sim.runs.record`: :class:`~sim.runs.record.MeasuredRun` (configuration, measurements,
  how each input argument was read);
* readers, one per format (:mod:`sim.runs.readers` picks one): Megatron-LM's arguments
  (:mod:`~sim.runs.megatron_args`, :mod:`~sim.runs.megatron_table`), logs
  (:mod:`~sim.runs.megatron_log`) and functional-test golden values
  (:mod:`~sim.runs.megatron_golden`); Megatron-Bridge configs (:mod:`~sim.runs.bridge`) and
  performance recipes (:mod:`~sim.runs.bridge_recipes`); torchtitan's TOML and log
  (:mod:`~sim.runs.torchtitan`); DeepSpeed's config, launch command and log
  (:mod:`~sim.runs.deepspeed`); the measured-data CSV layouts (:mod:`~sim.runs.measured_csv`,
  :mod:`~sim.runs.vtrain`); launch commands (:mod:`~sim.runs.argv`); the warm-up rule
  (:mod:`~sim.runs.warmup`);
* :mod:`sim.runs.express`: a run as pipesim simulates it, or every reason it cannot (its
  hardware: :mod:`~sim.runs.express_hardware`; its memory policy: :mod:`~sim.runs.express_policy`;
  its model's generator and shape: :mod:`~sim.runs.express_model`);
* :mod:`sim.runs.predict`: expressed runs simulated, one simulation per configuration.

The workflows over them are :mod:`sim.import_runs` (``sim import``), :mod:`sim.compare`
(``sim compare``) and :mod:`sim.calibrate_runs` (``sim calibrate --from-runs``).
"""
