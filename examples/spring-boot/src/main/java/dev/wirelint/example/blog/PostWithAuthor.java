package dev.wirelint.example.blog;

import org.springframework.data.annotation.Id;
import org.springframework.data.mongodb.core.mapping.Document;
import org.springframework.data.mongodb.core.mapping.DocumentReference;
import org.springframework.data.mongodb.core.mapping.Field;

/**
 * The same documents as {@link Post}, with the author resolved by Spring
 * Data: {@code @DocumentReference} stores the author's id and, on every
 * read, loads the author with a query of its own, one per post.
 */
@Document("posts")
public class PostWithAuthor {
  @Id private String id;
  private String title;

  @DocumentReference
  @Field("author")
  private Author author;

  protected PostWithAuthor() {}

  public String getId() {
    return id;
  }

  public String getTitle() {
    return title;
  }

  public Author getAuthor() {
    return author;
  }
}
