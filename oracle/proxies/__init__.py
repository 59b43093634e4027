"""What stands between the agent and the world: network isolation, recorders and relays."""
