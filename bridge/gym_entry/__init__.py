"""The Gym server entry: ``resources_servers/gym_mcp_bridge/`` is a folder Gym's own launcher starts like
any resources server (``gym env start``, ``ng_run``). Its ``app.py`` runs in the venv Gym builds for it
and hands over to the bridge (``bridge/commands/gym_entry.py`` says where the launcher finds it)."""
