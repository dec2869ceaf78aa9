"""The overcloud, the product Undercloud deploys: its code here, its data beside it
(roles_data.yaml, overcloud.j2.yaml, services/, environments/, examples/). The HOT engine
that runs it is undercloud/orchestration/.

- library.py  what each service template declares (read before the stack exists)
- roles.py    roles_data.yaml and the shipped examples
- plan.py     roles + library -> the plan directory (template, registry, environments)
- secrets.py  generated secrets and the stack directory's private files
- addresses.py the virtual IP kept per stack, keepalived's router id
- clouds.py   clouds.yaml with the admin credentials
- deploy.py   what `undercloud deploy` reads back: image parameters, progress, failures
"""
