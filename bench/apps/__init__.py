"""Applications that benchmark workers load by import path."""
