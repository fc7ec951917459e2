package dev.wirelint.example.blog;

import org.springframework.data.annotation.Id;
import org.springframework.data.mongodb.core.mapping.Document;

/** An author; the id is the author's handle. */
@Document("authors")
public class Author {
  @Id private String id;
  private String name;

  protected Author() {}

  public Author(String id, String name) {
    this.id = id;
    this.name = name;
  }

  public String getId() {
    return id;
  }

  public String getName() {
    return name;
  }
}
