"""Provisioning (Ironic + Nova's part): nodes, their drivers, the state machine, the scheduler."""
