"""Agents: an agent profile's session (`agent-sandbox claude …`).

exe.py resolves the agent's executable as the user's shell would and makes
that exact file run inside; copy.py puts the agent's configuration on a
session copy and merges it back under a guard; launch.py is a profile
launch, compiled or served from the plan cache, with its copies made again
on a hit. What is decided about an agent's state stays pure in policy/
(agentstate, agentmerge); here is what touches the files. Stands on the
services (the registry, egress's brokers) and the plan cache (floor: with
services/ and jobs/, below launch/). Imports nothing.
"""
