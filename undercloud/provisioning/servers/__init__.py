"""Servers (Nova-like): flavors, hypervisor hosts, and one realiser per hypervisor type.

base.py is the realiser interface; service.py the servers service the API and the
OS::Nova::Server plugin use.
"""
