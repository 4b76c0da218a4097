"""Leafnode connections: a listener hubs accept leaf servers on, and remotes a leaf dials."""
