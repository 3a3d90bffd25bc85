"""The recovery subsystem (controller host, root): the controller that turns a node fault back into a
running job, its pure plan and policies, and the journal every step is written to."""
