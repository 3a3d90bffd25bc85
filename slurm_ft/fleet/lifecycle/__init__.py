"""The node lifecycle subsystem (controller host, root): what happens to a node from its fault to its
return to the pool, the sweep that drives it, and each node's history."""
