"""The virtual lab ("QuintupleO"): libvirt VMs with virtual BMCs, on a lab network."""
