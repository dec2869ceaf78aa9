"""Servers (Nova-like): flavors, hypervisor hosts, and one realiser per hypervisor type.

base.py is the realiser interface; service.py the servers service the API and the
OS::Nova::Server plugin use, with its parts beside it: placement.py (hypervisor hosts,
where a server goes), image_choice.py, first_boot.py (the first-boot files),
forwarding.py (requests about another host's servers) and leftovers.py.
"""
