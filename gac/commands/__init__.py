"""Commands that join components live here.

A component (`service`, `profiler_agent`, `solver`, `proof`) registers only its own
commands and imports no other component beyond its layer. A command that needs two
of them, e.g. `gac align --profile-missing` (the agent times, the service stores) or
`gac profile` (agent timing stored straight into the local database), is composition:
it lives in this package and is registered from `gac/cli.py`'s COMPONENTS, with the
extras it needs.
"""

TOKEN_HINT = "--token or $GAC_TOKEN"  # how a command's user gives the service a token (gac.client says it on a 401)
