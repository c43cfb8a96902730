"""The application's side: the App, job handles, status events, queue policies, finding an App by name."""
