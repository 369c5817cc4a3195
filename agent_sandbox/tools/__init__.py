"""Tools: doctor (can this host give a real sandbox?), explain (why a path or
variable is treated so; `config show`), status (running sessions), logs (the
chaperon's audit logs). They read what the pipeline decides — through the
same prepare(), choose_backend and backend plans a launch uses — so what
they say cannot drift from what `agent-sandbox run` does.
"""
