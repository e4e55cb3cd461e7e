-- Why an automation was parked: a template that failed at fire time. Cleared when it is resumed.
ALTER TABLE automations ADD COLUMN last_error TEXT;
