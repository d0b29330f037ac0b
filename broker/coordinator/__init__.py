"""What the group, share and transaction coordinators share: their internal topics and records."""
