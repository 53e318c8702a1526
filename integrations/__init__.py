"""The runtime probe inside other tools' loops: a Lightning Callback, a Hugging Face TrainerCallback
and a pytest plugin. Each is a thin driver over `gradlint.runtime_probe.session.StepProbe`: it says
where a training step begins and ends and what to do with the report; measuring, deciding and
naming the holders are the probe's.

    from gradlint.integrations.lightning import LeakProbe              # pip install 'torch-gradlint[lightning]'
    from gradlint.integrations.huggingface import LeakProbeCallback    # pip install 'torch-gradlint[hf]'
    @pytest.mark.gradlint_probe(steps=30)                              # the pytest plugin, registered by pytest11

Nothing here is imported by `import gradlint` or `gradlint check`, and this package imports none of
its modules: each needs its own framework, and the pytest plugin must not import torch.
"""
