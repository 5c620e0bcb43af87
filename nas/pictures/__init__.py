"""Pictures: a cell drawn as a graph (`layout` places the nodes) and a run's curves (`plots`)."""
