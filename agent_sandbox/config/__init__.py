"""Configuration: text → Settings (the pipeline's first stage).

sandbox.conf layers (shipped defaults, admin, user, conf.d matching the
project, an agent profile, environment overrides, flags) are parsed as shell
assignments, never executed (syntax.py), merged with admin floors
(load.py, locks.py) and validated (model.py, pydantic, only when the
configuration changed) into one typed, frozen `settings.Settings` that names
where each value came from. Nothing here imports a later stage.
"""
