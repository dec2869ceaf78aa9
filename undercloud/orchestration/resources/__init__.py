"""Resource type plugins, one small class per type, registered by `type_name`.

Add a type by adding a module here with a `Plugin` subclass (see base.py); registry.py finds
it. The engine creates, updates, deletes and polls plugins; the template side validates
resource types and properties against the registry.
"""
