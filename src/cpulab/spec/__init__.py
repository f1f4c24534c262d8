"""What a run is asked, shared by every stage: its settings (each declared once), the
decision policy made of them, and the record that stores both with the run."""
